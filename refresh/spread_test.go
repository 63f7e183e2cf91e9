package refresh

import (
	"fmt"
	"testing"
	"time"

	"github.com/bigtables/bigtables/schedule"
)

func TestSpreadOffsetsAreStableAndSpread(t *testing.T) {
	const spread = 10 * time.Minute
	seen := map[time.Duration]bool{}
	var buckets [10]int
	for i := range 10_000 {
		uid := fmt.Sprintf("record-%d", i)
		off := SpreadOffset(uid, spread)
		if off < 0 || off >= spread {
			t.Fatalf("offset %v of %s outside [0, %v)", off, uid, spread)
		}
		if again := SpreadOffset(uid, spread); again != off {
			t.Fatalf("offset of %s changed: %v then %v", uid, off, again)
		}
		seen[off] = true
		buckets[off*10/spread]++
	}
	if len(seen) < 9_900 {
		t.Fatalf("only %d distinct offsets for 10,000 records", len(seen))
	}
	for i, n := range buckets {
		if n < 800 || n > 1200 {
			t.Fatalf("minute %d of the window holds %d of 10,000 records, want about 1,000", i, n)
		}
	}
	if SpreadOffset("x", 0) != 0 {
		t.Fatal("no spread, no offset")
	}
}

func TestSpreadShiftsEveryPlannedRefresh(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	daily, err := schedule.Parse("DTSTART:20240101T000000Z\nRRULE:FREQ=DAILY", now)
	if err != nil {
		t.Fatal(err)
	}
	p := DefaultPolicy()
	p.Spread = Duration(time.Hour)
	r := Rules{daily, p}.ForRecord("abc")
	off := SpreadOffset("abc", time.Hour)
	if off == 0 {
		t.Fatal("test needs a non-zero offset")
	}
	midnight := time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)
	// The first planned refresh after now is tomorrow's midnight plus the
	// offset; after that one, the day after's, at the same offset.
	s, err := r.Start(State{RefreshAt: now}, now, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if want := midnight.Add(off); !s.RefreshAt.Equal(want) {
		t.Fatalf("refresh_at %v, want %v", s.RefreshAt, want)
	}
	s, err = r.Succeed(s, now.Add(time.Minute), ReceivedAt(now.Add(time.Minute)), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if want := midnight.Add(off); !s.RefreshAt.Equal(want) {
		t.Fatalf("after a success: refresh_at %v, want %v", s.RefreshAt, want)
	}
	if got, want := r.Next(midnight.Add(off)), midnight.Add(24*time.Hour+off); !got.Equal(want) {
		t.Fatalf("the refresh after the shifted one: %v, want %v (same offset)", got, want)
	}
	// Just before its shifted occurrence, the next one is that occurrence.
	if got := r.Next(midnight.Add(off - time.Second)); !got.Equal(midnight.Add(off)) {
		t.Fatalf("next just before the shifted occurrence: %v, want %v", got, midnight.Add(off))
	}
	// Without ForRecord, no shift.
	if got := (Rules{daily, p}).Next(now); !got.Equal(midnight) {
		t.Fatalf("next without ForRecord %v, want %v", got, midnight)
	}
	bad := DefaultPolicy()
	bad.Spread = Duration(8 * 24 * time.Hour)
	if err := bad.Validate(); err == nil {
		t.Fatal("a spread over a week was accepted")
	}
}
