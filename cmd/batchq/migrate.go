package main

import (
	"bufio"
	"database/sql"
	"errors"
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
				Usage:  "apply pending migrations (up to --to)",
				Flags:  []cli.Flag{upTo},
				Action: withProvider(migrateUp),
			},
			{
				Name:   "down",
				Usage:  "revert the latest migration (or down to --to, exclusive)",
				Flags:  []cli.Flag{downTo},
				Action: withProvider(migrateDown),
			},
			{
				Name:   "status",
				Usage:  "list migrations and whether each is applied",
				Flags:  []cli.Flag{commandFormatFlag()},
				Action: withProvider(migrateStatus),
			},
			{
				Name:  "get",
				Usage: "print the SQL of one migration, for users who apply it with their own tooling",
				Flags: []cli.Flag{
					&cli.Int64Flag{Name: "version", Usage: "required: the migration's version number"},
					&cli.BoolFlag{Name: "up", Usage: "print the Up section"},
					&cli.BoolFlag{Name: "down", Usage: "print the Down section"},
				},
				Action: migrateGet,
			},
			migrateGrantsCommand(),
		},
	}
}

func withProvider(run func(*cli.Context, *goose.Provider) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		p, closeDB, err := openProvider(c)
		if err != nil {
			return err
		}
		defer closeDB()
		return run(c, p)
	}
}

// openProvider opens --database-url and a goose provider over batchq's
// migrations; the caller closes the database with the returned function.
func openProvider(c *cli.Context) (*goose.Provider, func() error, error) {
	db, err := openSQL(c.String("database-url"))
	if err != nil {
		return nil, nil, err
	}
	p, err := migrations.NewProvider(db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return p, db.Close, nil
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

func migrateUp(c *cli.Context, p *goose.Provider) error {
	if err := checkTo(c); err != nil {
		return err
	}
	var res []*goose.MigrationResult
	var err error
	if c.IsSet("to") {
		res, err = p.UpTo(c.Context, c.Int64("to"))
	} else {
		res, err = p.Up(c.Context)
	}
	for _, r := range res {
		fmt.Fprintf(c.App.Writer, "applied %s (%s)\n", r.Source.Path, r.Duration.Round(1e6))
	}
	if err != nil {
		return fmt.Errorf("batchq: migrate up: %w", err)
	}
	return printVersion(c, p)
}

func migrateDown(c *cli.Context, p *goose.Provider) error {
	if err := checkTo(c); err != nil {
		return err
	}
	var res []*goose.MigrationResult
	var err error
	if c.IsSet("to") {
		res, err = p.DownTo(c.Context, c.Int64("to"))
	} else {
		var r *goose.MigrationResult
		r, err = p.Down(c.Context)
		if r != nil {
			res = append(res, r)
		}
	}
	for _, r := range res {
		fmt.Fprintf(c.App.Writer, "reverted %s (%s)\n", r.Source.Path, r.Duration.Round(1e6))
	}
	if errors.Is(err, goose.ErrNoNextVersion) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("batchq: migrate down: %w", err)
	}
	return printVersion(c, p)
}

func printVersion(c *cli.Context, p *goose.Provider) error {
	v, err := p.GetDBVersion(c.Context)
	if err != nil {
		return fmt.Errorf("batchq: schema version: %w", err)
	}
	fmt.Fprintf(c.App.Writer, "schema version %d\n", v)
	return nil
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

// migrateGet prints one section of a migration file as it is embedded.
func migrateGet(c *cli.Context) error {
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
