package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/internal/demo"
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
is the default minute in 15 seconds.`,
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "duration", Usage: "how long the story plays, wall clock", Value: demo.DefaultDuration, EnvVars: []string{"BATCHQ_DEMO_DURATION"}},
			&cli.Float64Flag{Name: "speed", Usage: "play the story this many times faster (quota refill, latency, arrivals, deadlines)", Value: 1, EnvVars: []string{"BATCHQ_DEMO_SPEED"}},
			&cli.StringFlag{Name: "chart", Usage: "where to write the chart of token shares: .svg or .png", Value: demo.DefaultChartPath, EnvVars: []string{"BATCHQ_DEMO_CHART"}},
			&cli.StringFlag{Name: "database-name", Usage: "the demo's own database, dropped and re-created on each run; an existing database the demo did not create is refused", Value: demo.DefaultDatabaseName, EnvVars: []string{"BATCHQ_DEMO_DATABASE"}},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the story's random choices", Value: 1, EnvVars: []string{"BATCHQ_DEMO_SEED"}},
		},
		Action: runDemo,
	}
}

func runDemo(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("batchq: demo: unexpected argument %q", c.Args().First())
	}
	cfg := demo.Config{
		DatabaseURL:  c.String("database-url"),
		DatabaseName: c.String("database-name"),
		Duration:     c.Duration("duration"),
		Speed:        c.Float64("speed"),
		ChartPath:    c.String("chart"),
		Seed:         c.Uint64("seed"),
		Out:          c.App.Writer,
		Terminal:     isTerminal(c.App.Writer),
	}
	switch ext := strings.ToLower(filepath.Ext(cfg.ChartPath)); {
	case cfg.Duration < demo.MinDuration || cfg.Duration > demo.MaxDuration:
		return usagef("batchq: --duration %s: must be in %s..%s", cfg.Duration, demo.MinDuration, demo.MaxDuration)
	case !(cfg.Speed >= demo.MinSpeed && cfg.Speed <= demo.MaxSpeed):
		return usagef("batchq: --speed %v: must be in %v..%v", cfg.Speed, demo.MinSpeed, demo.MaxSpeed)
	case ext != ".svg" && ext != ".png":
		return usagef("batchq: --chart %q: must end in .svg or .png", cfg.ChartPath)
	}
	if err := demo.CheckDatabaseName(cfg.DatabaseName); err != nil {
		return usagef("batchq: --database-name %q: must be 1-63 characters of a-z, 0-9 and _, not starting with a digit", cfg.DatabaseName)
	}
	if err := checkDemoDatabase(c.Context, cfg.DatabaseURL, cfg.DatabaseName); err != nil {
		return err
	}
	_, err := demo.Run(c.Context, cfg) // marks the database it creates (demo.Marker)
	return err
}

// mayDropDemoDatabase reports whether the demo may drop the database name
// that exists with comment (nil: none). Builds before the marker left
// their database, always the default one, unmarked; that one is taken as
// the demo's, any other unmarked database is not.
func mayDropDemoDatabase(name string, comment *string) bool {
	if comment == nil {
		return name == demo.DefaultDatabaseName
	}
	return *comment == demo.Marker
}

// checkDemoDatabase fails with a usage error when the database name exists
// on the server of url and is not the demo's to drop.
func checkDemoDatabase(ctx context.Context, url, name string) error {
	conn, err := demoAdmin(ctx, url, name)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var comment *string
	err = conn.QueryRow(ctx, `SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1`, name).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("batchq: demo: look for database %s: %w", name, err)
	}
	if !mayDropDemoDatabase(name, comment) {
		return usagef("batchq: --database-name %s: database %s exists and batchq demo did not create it; the demo drops its database, so name one that does not exist", name, name)
	}
	return nil
}

// demoAdmin connects to the server of url as the demo does to drop and
// create its database: to the URL's own database, or to postgres if that
// is the demo's.
func demoAdmin(ctx context.Context, url, name string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, usagef("batchq: --database-url: %v", err)
	}
	if cfg.Database == name {
		cfg.Database = "postgres"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("batchq: demo: connect to %s on %s: %w", cfg.Database, cfg.Host, err)
	}
	return conn, nil
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
