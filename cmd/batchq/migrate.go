package main

import (
	"bufio"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/migrations"
)

func migrateCommand() *cli.Command {
	upTo := &cli.Int64Flag{Name: "to", Usage: "apply up to and including this version", DefaultText: "every pending migration"}
	downTo := &cli.Int64Flag{Name: "to", Usage: "revert down to this version, which stays applied (0: revert every migration)", DefaultText: "revert only the latest migration"}
	return &cli.Command{
		Name:  "migrate",
		Usage: "apply, revert and inspect batchq's schema migrations",
		Subcommands: []*cli.Command{
			{
				Name:   "up",
				Usage:  "apply pending migrations (up to --to), then the function files whose text changed",
				Flags:  []cli.Flag{upTo},
				Action: withDB(migrateUp),
			},
			{
				Name:   "down",
				Usage:  "revert the latest migration (or down to --to, exclusive)",
				Flags:  []cli.Flag{downTo},
				Action: withDB(migrateDown),
			},
			{
				Name:   "status",
				Usage:  "list migrations and whether each is applied",
				Flags:  []cli.Flag{commandFormatFlag()},
				Action: withProvider(migrateStatus),
			},
			{
				Name:  "get",
				Usage: "print the SQL of one migration, or of the function files, for users who apply it with their own tooling",
				Flags: []cli.Flag{
					&cli.Int64Flag{Name: "version", Usage: "the migration's version number (or --functions)"},
					&cli.BoolFlag{Name: "up", Usage: "print the Up section"},
					&cli.BoolFlag{Name: "down", Usage: "print the Down section"},
					&cli.BoolFlag{Name: "functions", Usage: "print the function files, in the order to run them in one transaction after the migrations"},
				},
				Action: migrateGet,
			},
			migrateGrantsCommand(),
		},
	}
}

func withProvider(run func(*cli.Context, *goose.Provider) error) cli.ActionFunc {
	return withDB(func(c *cli.Context, db *sql.DB) error {
		p, err := migrations.NewProvider(db)
		if err != nil {
			return err
		}
		return run(c, p)
	})
}

// withDB opens --database-url for run and closes it after.
func withDB(run func(*cli.Context, *sql.DB) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		db, err := openSQL(c.String("database-url"))
		if err != nil {
			return err
		}
		defer db.Close()
		return run(c, db)
	}
}

func openSQL(url string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("batchq: --database-url: %w", err)
	}
	return stdlib.OpenDB(*cfg), nil
}

// checkTo refuses a --to that names no version; goose would fail on it
// only after connecting, as if the database were at fault.
func checkTo(c *cli.Context) error {
	if v := c.Int64("to"); v < 0 {
		return usagef("batchq: --to %d: must be a version, 0 or more", v)
	}
	return nil
}

func migrateUp(c *cli.Context, db *sql.DB) error {
	if err := checkTo(c); err != nil {
		return err
	}
	to := goose.MaxVersion
	if c.IsSet("to") {
		to = c.Int64("to")
	}
	res, err := migrations.UpTo(c.Context, db, to)
	printResult(c, res, "applied")
	if err != nil {
		return err
	}
	return nil
}

func migrateDown(c *cli.Context, db *sql.DB) error {
	if err := checkTo(c); err != nil {
		return err
	}
	to := c.Int64("to")
	if !c.IsSet("to") {
		p, err := migrations.NewProvider(db)
		if err != nil {
			return err
		}
		v, err := p.GetDBVersion(c.Context)
		if err != nil {
			return fmt.Errorf("batchq: schema version: %w", err)
		}
		to = max(v-1, 0)
	}
	res, err := migrations.DownTo(c.Context, db, to)
	printResult(c, res, "reverted")
	return err
}

// printResult says what a migration run did, then the version it left.
func printResult(c *cli.Context, res *migrations.Result, verb string) {
	if res == nil {
		return
	}
	for _, r := range res.Migrations {
		fmt.Fprintf(c.App.Writer, "%s %s (%s)\n", verb, r.Source.Path, r.Duration.Round(1e6))
	}
	for _, f := range res.Functions {
		fmt.Fprintf(c.App.Writer, "applied db/functions/%s\n", f)
	}
	fmt.Fprintf(c.App.Writer, "schema version %d\n", res.Version)
}

func migrateStatus(c *cli.Context, p *goose.Provider) error {
	st, err := p.Status(c.Context)
	if err != nil {
		return fmt.Errorf("batchq: migrate status: %w", err)
	}
	d := newDataset("version", "state", "applied_at", "file")
	for _, s := range st {
		var at *time.Time
		if !s.AppliedAt.IsZero() {
			t := s.AppliedAt.UTC()
			at = &t
		}
		d.add(s.Source.Version, string(s.State), at, s.Source.Path)
	}
	return writeList(c, d)
}

// migrateGet prints one section of a migration file as it is embedded, or
// the function files.
func migrateGet(c *cli.Context) error {
	if c.Bool("functions") {
		if c.IsSet("version") || c.Bool("up") || c.Bool("down") {
			return usagef("migrate get: give --functions alone, or --version with --up or --down")
		}
		sql, err := migrations.FunctionsSQL()
		if err != nil {
			return err
		}
		fmt.Fprint(c.App.Writer, sql)
		return nil
	}
	if err := requireFlags(c, "version"); err != nil {
		return err
	}
	up, down := c.Bool("up"), c.Bool("down")
	if up == down {
		return usagef("migrate get: give exactly one of --up or --down")
	}
	v := c.Int64("version")
	names, err := fs.Glob(migrations.FS, fmt.Sprintf("%05d_*.sql", v))
	if err != nil || len(names) != 1 {
		return usagef("batchq: migrate get: --version %d: no such migration", v)
	}
	b, err := fs.ReadFile(migrations.FS, names[0])
	if err != nil {
		return err
	}
	want := "-- +goose Up"
	if down {
		want = "-- +goose Down"
	}
	fmt.Fprint(c.App.Writer, section(string(b), want))
	return nil
}

// section returns the lines of a goose file from the marker line to the next
// Up/Down marker, marker included.
func section(src, marker string) string {
	var out strings.Builder
	in := false
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if trimmed == "-- +goose Up" || trimmed == "-- +goose Down" {
			in = trimmed == marker
		}
		if in {
			out.WriteString(line)
			out.WriteByte('\n')
		}
	}
	return out.String()
}
