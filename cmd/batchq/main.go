// Command batchq runs and inspects batchq queues: migrations, workers,
// reports and the demo. Run `batchq help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	// The zone database, for schedules' time zones on a host without one.
	_ "time/tzdata"
)

func main() {
	ctx, stopping := context.WithCancel(context.Background())
	// The first signal asks the command to stop, as it sees fit (work
	// waits up to --shutdown-timeout for running requests). A second one
	// ends the process at once.
	ignored := map[os.Signal]bool{os.Interrupt: signal.Ignored(os.Interrupt), syscall.SIGTERM: signal.Ignored(syscall.SIGTERM)}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		stopping()
		s := <-signals
		endBySignal(s.(syscall.Signal), ignored[s])
	}()
	code := exitCode(newApp(os.Stdout, os.Stderr).RunContext(ctx, os.Args), os.Stderr)
	stopping()
	os.Exit(code)
}

// endBySignal ends the process as the signal's default action does: it
// gives the signal its default action back and sends it again. A process
// started with the signal ignored, as a background job of a
// non-interactive shell is with SIGINT, would be given back "ignored", so
// it exits instead with the status a shell reports for a process the
// signal ended, 128 plus its number.
func endBySignal(s syscall.Signal, ignoredAtStart bool) {
	if !ignoredAtStart {
		signal.Reset(s)
		_ = syscall.Kill(os.Getpid(), s)
		// The signal ends the process; the exit below is only for a kernel
		// slow to deliver it.
		time.Sleep(time.Second)
	}
	os.Exit(128 + int(s))
}
