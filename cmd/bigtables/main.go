// Command bigtables runs the scheduler, the poller, the reference worker and
// the operator's commands. Run it without arguments for usage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/bigtables/bigtables/cli"
	_ "time/tzdata" // TZIDs resolve in slim containers too
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
