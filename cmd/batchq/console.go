package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/queue"

	dec "github.com/batchq/batchq/internal/decimal"
)

func consoleCommand() *cli.Command {
	return &cli.Command{
		Name:  "console",
		Usage: "serve the web console: queues, tenants' shares against their weights, the quota, live",
		Description: `Serves the web console at http://ADDR/: an overview of every queue and quota key, a
page per queue with each tenant's backlog, waits and share of the tokens against its
weight (a chart over a window chosen on the page, 1m to 24h), a page per tenant with its recent
outcomes and errors, and a page per job. The numbers refresh on their own.

Without --token-env the console is read-only. With it, the token in that environment
variable (at least 16 bytes; never on the command line) signs a browser in, and then
the console pauses and resumes queues, changes a tenant's weight or bound, cancels a
tenant's jobs (showing the count first) and retries failed or discarded jobs; every
form carries a CSRF token. The database role of --database-url decides the rest:
connected as the app role the console shows everything but payloads and results and
takes no action; as the operator role it pauses, resumes and cancels; as the schema's
owner it does everything (docs/console.md).`,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name: "addr",
				Usage: "serve at http://ADDR/; a bare :PORT listens on 127.0.0.1 only, " +
					"name a host (e.g. 0.0.0.0:8080) to listen on others",
				Value: "127.0.0.1:8080", EnvVars: []string{"BATCHQ_CONSOLE_ADDR"},
			},
			&cli.StringFlag{Name: "token-env", Usage: "enable actions with the token in this environment variable (empty: read-only)", EnvVars: []string{"BATCHQ_CONSOLE_TOKEN_ENV"}},
			&cli.IntFlag{Name: "top-tenants", Usage: "tenants per queue page with a row of their own, those with the most queued tokens; the rest are summed as others", Value: console.DefaultTopTenants, EnvVars: []string{"BATCHQ_CONSOLE_TOP_TENANTS"}},
			&cli.DurationFlag{Name: "refresh", Usage: "how often a page refreshes its numbers, from 100ms to 24h", Value: console.DefaultRefresh, EnvVars: []string{"BATCHQ_CONSOLE_REFRESH"}},
			&cli.Float64Flag{Name: "reserve", Usage: "the workers' --reserve, to show each quota key's reserve in tokens, in [0,1)", Value: console.DefaultReserve, EnvVars: []string{"BATCHQ_RESERVE"}},
		},
		Action: runConsole,
	}
}

func runConsole(c *cli.Context) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if err := textOnly(c, "console", "it serves web pages and prints one line of text"); err != nil {
		return err
	}
	opts := console.Options{TopTenants: c.Int("top-tenants"), Refresh: c.Duration("refresh"), Reserve: c.Float64("reserve")}
	switch n := opts.TopTenants; {
	case n < 1 || n > 1000:
		return usagef("batchq: --top-tenants %d: must be in 1..1000", n)
	case opts.Refresh < 100*time.Millisecond || opts.Refresh > console.MaxRefresh:
		return usagef("batchq: --refresh %s: must be from 100ms to %s", opts.Refresh, console.MaxRefresh)
	case !(opts.Reserve >= 0 && opts.Reserve < 1):
		return usagef("batchq: --reserve %s: must be in [0,1)", dec.Format(opts.Reserve))
	}
	if env := c.String("token-env"); c.IsSet("token-env") {
		v, ok := os.LookupEnv(env)
		if env == "" || !ok || v == "" {
			return usagef("batchq: --token-env: environment variable %q is not set", env)
		}
		if len(v) < console.MinTokenBytes {
			return usagef("batchq: --token-env: the token in %s must be at least %d bytes (got %d)", env, console.MinTokenBytes, len(v))
		}
		opts.Token = v
	}
	addr := c.String("addr")
	listen, err := metricsListenAddr(addr)
	if err != nil {
		return usagef("batchq: --addr %q: %v", addr, err)
	}
	cfg, err := poolConfig(c)
	if err != nil {
		return err
	}
	console.TunePool(cfg)
	pool, err := pgxpool.NewWithConfig(c.Context, cfg)
	if err != nil {
		return fmt.Errorf("batchq: connect: %w", err)
	}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, nil))
	client, err := queue.NewClient(pool, queue.Config{Logger: log})
	if err != nil {
		return err
	}
	opts.Logger = log
	h, err := console.Handler(client, &opts)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if dnsErr := (*net.DNSError)(nil); errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return usagef("batchq: --addr %q: host %q is not found", addr, dnsErr.Name)
	}
	if err != nil {
		return fmt.Errorf("batchq: --addr: %w", err)
	}
	if a, ok := ln.Addr().(*net.TCPAddr); ok && a.IP.IsLoopback() {
		h = console.LoopbackOnly(h)
	}
	mode := "read-only: no --token-env"
	if opts.Token != "" {
		mode = "actions need the token in $" + c.String("token-env")
	}
	fmt.Fprintf(c.App.Writer, "batchq console: serving http://%s/ (%s); Ctrl-C stops it\n", ln.Addr(), mode)
	return serveUntilDone(c.Context, ln, h, log)
}

// serveUntilDone serves h on ln until ctx ends, then shuts down.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("batchq: console: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		log.Warn("console: shutdown", "err", err)
	}
	return nil
}
