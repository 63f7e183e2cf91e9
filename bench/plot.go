package bench

import (
	"fmt"
	"html"
	"math"
	"os"
	"strings"
)

// series is one line of a plot panel.
type series struct {
	name  string
	color string
	y     []float64
}

// panel is one chart of a plot: lines over the same x axis.
type panel struct {
	title string
	lines []series
}

// WriteSoakPlot draws the soak's samples over time into an SVG file:
// throughput, p99 latencies, table and index sizes, dead tuples, and the
// process's memory, one panel each.
func WriteSoakPlot(path string, r SoakResult) error {
	x := make([]float64, len(r.Samples))
	col := func(f func(SoakSample) float64) []float64 {
		v := make([]float64, len(r.Samples))
		for i, s := range r.Samples {
			v[i] = f(s)
		}
		return v
	}
	for i, s := range r.Samples {
		x[i] = s.Minute
	}
	panels := []panel{
		{"throughput (cycles/s applied)", []series{{"cycles/s", "#1f77b4", col(func(s SoakSample) float64 { return s.CyclesPerSec })}}},
		{"p99 latency (ms)", []series{
			{"due -> job at a worker", "#d62728", col(func(s SoakSample) float64 { return s.DueToJobP99Ms })},
			{"start -> result applied", "#9467bd", col(func(s SoakSample) float64 { return s.StartToAppliedP99Ms })},
		}},
		{"size (MiB)", []series{
			{"records table", "#2ca02c", col(func(s SoakSample) float64 { return s.TableMiB })},
			{"its indexes", "#ff7f0e", col(func(s SoakSample) float64 { return s.IndexMiB })},
			{"history (with indexes)", "#8c564b", col(func(s SoakSample) float64 { return s.HistoryMiB })},
		}},
		{"dead tuples in the records table (thousands; live: the records)", []series{
			{"dead", "#d62728", col(func(s SoakSample) float64 { return float64(s.DeadTuples) / 1000 })},
		}},
		{"bench process memory (MiB)", []series{
			{"RSS", "#17becf", col(func(s SoakSample) float64 { return s.RSSMiB })},
			{"Go heap in use", "#7f7f7f", col(func(s SoakSample) float64 { return s.HeapMiB })},
		}},
	}
	title := fmt.Sprintf("bigtables soak: %s records every %d min, %.0f cycles/s target, %s, vacuum: %s",
		Thousands(r.Records), r.Period, r.Rate, r.Duration, r.VacuumEvery)
	if r.TableOptions != "" {
		title += "\ntable options: " + r.TableOptions
	}
	if err := os.WriteFile(path, []byte(plotSVG(title, x, panels)), 0o644); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

// plotSVG renders panels stacked, sharing the x axis (minutes).
func plotSVG(title string, x []float64, panels []panel) string {
	const w, ph, left, right, top, gap = 860.0, 150.0, 70.0, 200.0, 50.0, 45.0
	h := top + float64(len(panels))*(ph+gap)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, line := range strings.Split(title, "\n") {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", left, 18+i*15, html.EscapeString(line))
	}
	xmax := 0.0
	for _, v := range x {
		xmax = math.Max(xmax, v)
	}
	if xmax == 0 {
		xmax = 1
	}
	pw := w - left - right
	for i, p := range panels {
		y0 := top + float64(i)*(ph+gap) + 15
		ymax := 0.0
		for _, s := range p.lines {
			for _, v := range s.y {
				ymax = math.Max(ymax, v)
			}
		}
		ymax = niceCeil(ymax)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-4, html.EscapeString(p.title))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, y0, pw, ph)
		for k := 0; k <= 4; k++ { // horizontal grid and y labels
			yy := y0 + ph - float64(k)*ph/4
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/>`+"\n", left, yy, left+pw, yy)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-5, yy+4, shortNum(ymax*float64(k)/4))
		}
		for k := 0; k <= 5; k++ { // x labels
			xx := left + float64(k)*pw/5
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", xx, y0+ph+14, shortNum(xmax*float64(k)/5))
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">min</text>`+"\n", left+pw, y0+ph+26)
		for j, s := range p.lines {
			var pts []string
			for n, v := range s.y {
				if n >= len(x) {
					break
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", left+x[n]/xmax*pw, y0+ph-v/ymax*ph))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
			for _, pt := range pts {
				xy := strings.Split(pt, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", xy[0], xy[1], s.color)
			}
			ly := y0 + 12 + float64(j)*16
			fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/>`+"\n", left+pw+10, ly-4, left+pw+28, ly-4, s.color)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>`+"\n", left+pw+33, ly, html.EscapeString(s.name))
		}
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for v <= 0).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// shortNum writes an axis label: 1250 -> 1.25k, 0.5 -> 0.5.
func shortNum(v float64) string {
	trim := func(x float64) string {
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", x), "0"), ".")
	}
	switch {
	case v >= 1e6:
		return trim(v/1e6) + "M"
	case v >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}
