// Command batchq runs and inspects batchq queues: migrations, workers,
// reports and the demo. Run `batchq help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	// The zone database, for schedules' time zones on a host without one.
	_ "time/tzdata"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks the command to stop, as it sees fit (work
	// waits up to --shutdown-timeout for running requests). From then on a
	// signal has its default effect: a second one ends the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := exitCode(newApp(os.Stdout, os.Stderr).RunContext(ctx, os.Args), os.Stderr)
	stop()
	os.Exit(code)
}
