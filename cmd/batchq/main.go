// Command batchq runs and inspects batchq queues: migrations, workers,
// reports and the demo. Run `batchq help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := exitCode(newApp(os.Stdout, os.Stderr).RunContext(ctx, os.Args), os.Stderr)
	stop()
	os.Exit(code)
}
