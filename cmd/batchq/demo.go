package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/internal/demo"

	dec "github.com/batchq/batchq/internal/decimal"
)

func demoCommand() *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "play the fair-queue story on a worker fleet against a simulated provider, and report",
		Description: `One tenant imports thousands of summarisation jobs; several small tenants submit a
few jobs each while it runs; a tenant on a larger plan has weight 3; some jobs carry
deadlines too short to meet; a user asks the assistant every second, through the
throttle the workers share. Three worker pools on separate connection pools work the
queue against a simulated provider on loopback (a token bucket with real rate-limit
headers, 429 with Retry-After, 80-400 ms latency).

The demo drops and re-creates its own database (--database-name) on the server of
--database-url, so it needs a role that may create databases; the database is kept
afterwards for a look. It refuses a database that exists and that it did not create
(it marks its own with a comment; an unmarked batchq_demo from an older build counts
as its own). While it runs it shows a live table per tenant and the quota;
at the end it prints a report of what held and writes a chart of each tenant's token
share over time (--chart). --speed plays the same story faster: --speed 4 --duration 15s
is the default minute in 15 seconds. While it plays, the web console serves the demo's
queue at --console-addr (read-only; http://127.0.0.1:8080/queues/summaries?window=1m by
default), so the shares can be watched as they form.`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Usage: "how long the story plays, wall clock", Value: demo.DefaultDuration, EnvVars: []string{"BATCHQ_DEMO_DURATION"}},
			&cli.Float64Flag{Name: "speed", Usage: "play the story this many times faster (quota refill, latency, arrivals, deadlines)", Value: 1, EnvVars: []string{"BATCHQ_DEMO_SPEED"}},
			&cli.StringFlag{Name: "chart", Usage: "where to write the chart of token shares: .svg or .png", Value: demo.DefaultChartPath, EnvVars: []string{"BATCHQ_DEMO_CHART"}},
			&cli.StringFlag{Name: "database-name", Usage: "the demo's own database, dropped and re-created on each run; an existing database the demo did not create is refused", Value: demo.DefaultDatabaseName, EnvVars: []string{"BATCHQ_DEMO_DATABASE"}},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the story's random choices", Value: 1, EnvVars: []string{"BATCHQ_DEMO_SEED"}},
			&cli.StringFlag{Name: "console-addr", Usage: "serve the web console (read-only) here while the story plays; a bare :PORT listens on 127.0.0.1 only (empty: no console)", Value: "127.0.0.1:8080", EnvVars: []string{"BATCHQ_DEMO_CONSOLE_ADDR"}},
		},
		Action: runDemo,
	}
}

func runDemo(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("batchq: demo: unexpected argument %q", c.Args().First())
	}
	if err := textOnly(c, "demo", "it prints a live table and a report for people, which are text only"); err != nil {
		return err
	}
	url, err := databaseURL(c)
	if err != nil {
		return err
	}
	cfg := demo.Config{
		DatabaseURL:  url,
		DatabaseName: c.String("database-name"),
		Duration:     c.Duration("duration"),
		Speed:        c.Float64("speed"),
		ChartPath:    c.String("chart"),
		Seed:         c.Uint64("seed"),
		ConsoleAddr:  c.String("console-addr"),
		Out:          c.App.Writer,
		Terminal:     isTerminal(c.App.Writer),
	}
	switch ext := strings.ToLower(filepath.Ext(cfg.ChartPath)); {
	case cfg.Duration < demo.MinDuration || cfg.Duration > demo.MaxDuration:
		return usagef("batchq: --duration %s: must be in %s..%s", cfg.Duration, demo.MinDuration, demo.MaxDuration)
	case !(cfg.Speed >= demo.MinSpeed && cfg.Speed <= demo.MaxSpeed):
		return usagef("batchq: --speed %s: must be in %v..%v", dec.Format(cfg.Speed), demo.MinSpeed, demo.MaxSpeed)
	case ext != ".svg" && ext != ".png":
		return usagef("batchq: --chart %q: must end in .svg or .png", cfg.ChartPath)
	}
	if cfg.ConsoleAddr != "" {
		addr, err := metricsListenAddr(cfg.ConsoleAddr)
		if err != nil {
			return usagef("batchq: --console-addr %q: %v", cfg.ConsoleAddr, err)
		}
		cfg.ConsoleAddr = addr
	}
	if err := demo.CheckDatabaseName(cfg.DatabaseName); err != nil {
		return usagef("batchq: --database-name %q: must be 1-63 characters of a-z, 0-9 and _, not starting with a digit", cfg.DatabaseName)
	}
	if err := demo.CheckMayDrop(c.Context, cfg.DatabaseURL, cfg.DatabaseName); errors.Is(err, demo.ErrNotTheDemos) {
		return usagef("batchq: --database-name %s: database %s exists and batchq demo did not create it; the demo drops its database, so name one that does not exist", cfg.DatabaseName, cfg.DatabaseName)
	} else if err != nil {
		return err
	}
	_, err = demo.Run(c.Context, cfg) // marks the database it creates (demo.Marker)
	return err
}

// isTerminal reports whether w is a terminal, where the live table is
// redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
