package web

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"

	"github.com/bigtables/bigtables/refresh"
	"github.com/bigtables/bigtables/store"
)

// The charts are drawn here as SVG markup. Every text in them goes
// through html.EscapeString, and every number is formatted by fmt, so
// the markup is safe to hand to the template as template.HTML.

// series is one line of the activity chart.
type series struct {
	Name  string
	Class string
	Value func(store.MinuteCounts) int64
}

var activitySeries = []series{
	{"started", "s-started", func(m store.MinuteCounts) int64 { return m.Started }},
	{"succeeded", "s-succeeded", func(m store.MinuteCounts) int64 { return m.Succeeded }},
	{"failed", "s-failed", func(m store.MinuteCounts) int64 { return m.Failed }},
	{"timed out", "s-timeout", func(m store.MinuteCounts) int64 { return m.TimedOut }},
	{"cancelled", "s-cancelled", func(m store.MinuteCounts) int64 { return m.Cancelled }},
}

// activityChart draws the attempts per minute as one line per outcome.
func activityChart(mins []store.MinuteCounts) template.HTML {
	const w, h, left, right, top, bottom = 900, 220, 48, 24, 12, 28
	var top1 int64 = 1
	for _, m := range mins {
		for _, s := range activitySeries {
			top1 = max(top1, s.Value(m))
		}
	}
	n := len(mins)
	x := func(i int) float64 {
		if n <= 1 {
			return left
		}
		return left + float64(i)*float64(w-left-right)/float64(n-1)
	}
	y := func(v int64) float64 { return top + float64(h-top-bottom)*(1-float64(v)/float64(top1)) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="attempts per minute over the last hour">`, w, h)
	for _, frac := range []float64{0, 0.5, 1} {
		v := int64(float64(top1) * frac)
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/><text class="axis" x="%d" y="%.1f" text-anchor="end">%d</text>`,
			left, w-right, y(v), y(v), left-6, y(v)+4, v)
	}
	for i, m := range mins {
		if m.Minute.Minute()%10 == 0 {
			fmt.Fprintf(&b, `<text class="axis" x="%.1f" y="%d" text-anchor="middle">%s</text>`, x(i), h-8, m.Minute.UTC().Format("15:04"))
		}
	}
	for _, s := range activitySeries {
		var pts []string
		for i, m := range mins {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(s.Value(m))))
		}
		fmt.Fprintf(&b, `<polyline class="line %s" points="%s"><title>%s</title></polyline>`, s.Class, strings.Join(pts, " "), html.EscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// gantt draws a record's attempts as a timeline: one bar per attempt from
// its start to its end (the running one to its deadline), oldest at the
// top, coloured by outcome.
func gantt(history []store.Attempt, s refresh.State, now time.Time) template.HTML {
	type bar struct {
		label, class, title string
		from, to            time.Time
	}
	var bars []bar
	for i := len(history) - 1; i >= 0; i-- {
		a := history[i]
		title := fmt.Sprintf("attempt %d: %s, %s to %s", a.AttemptNo, a.Outcome, clock(a.StartedAt), clock(a.FinishedAt))
		if a.Message != "" {
			title += ": " + a.Message
		}
		bars = append(bars, bar{fmt.Sprintf("#%d %s", a.AttemptNo, a.Outcome), "o-" + string(a.Outcome), title, a.StartedAt, a.FinishedAt})
	}
	if s.Running() {
		bars = append(bars, bar{fmt.Sprintf("#%d running", s.AttemptNo), "o-running",
			fmt.Sprintf("attempt %d: running since %s, deadline %s", s.AttemptNo, clock(s.StartedAt), clock(s.DeadlineAt)), s.StartedAt, s.DeadlineAt})
	}
	if len(bars) == 0 {
		return ""
	}
	from, to := bars[0].from, bars[0].to
	for _, b := range bars {
		if b.from.Before(from) {
			from = b.from
		}
		if b.to.After(to) {
			to = b.to
		}
	}
	if !to.After(from) {
		to = from.Add(time.Second)
	}
	const w, left, right, row, top = 900, 150, 12, 20, 8
	h := top + row*len(bars) + 24
	span := float64(to.Sub(from))
	x := func(t time.Time) float64 { return left + float64(w-left-right)*float64(t.Sub(from))/span }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="gantt" viewBox="0 0 %d %d" role="img" aria-label="attempt history">`, w, h)
	for i, br := range bars {
		y := top + i*row
		x0, x1 := x(br.from), x(br.to)
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d">%s</text>`, left-144, y+13, html.EscapeString(br.label))
		fmt.Fprintf(&b, `<rect class="bar %s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`,
			html.EscapeString(br.class), x0, y+3, max(x1-x0, 2), row-6, html.EscapeString(br.title))
	}
	if now.After(from) && now.Before(to) {
		fmt.Fprintf(&b, `<line class="now" x1="%.1f" x2="%.1f" y1="%d" y2="%d"><title>now</title></line>`, x(now), x(now), top, h-24)
	}
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d">%s</text><text class="axis" x="%d" y="%d" text-anchor="end">%s</text></svg>`,
		left, h-6, clock(from), w-right, h-6, clock(to))
	return template.HTML(b.String())
}
