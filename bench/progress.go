package bench

import (
	"fmt"
	"io"
	"os"
)

// progress reports how the bench advances. On a terminal each report
// replaces the previous one (carriage return, erase line), counters
// included; elsewhere (a CI log, a file) each step is one line of its own
// and the counters within a step are left out.
type progress struct {
	w   io.Writer
	tty bool
}

func newProgress(w io.Writer) *progress { return &progress{w: w, tty: isTerminal(w)} }

// isTerminal reports whether w is a character device, as a terminal is.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// step reports the start of a step.
func (p *progress) step(format string, args ...any) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K"+format, args...)
		return
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// update reports progress within a step, on a terminal only.
func (p *progress) update(format string, args ...any) {
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K"+format, args...)
	}
}

// end writes a last line, ending the line a terminal report left open.
func (p *progress) end(format string, args ...any) {
	if p.tty {
		format = "\r\033[K" + format
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}
