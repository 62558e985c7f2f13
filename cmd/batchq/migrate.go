package main

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
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
	// No environment variables: a BATCHQ_YES left set would answer for
	// every later run.
	yes := &cli.BoolFlag{Name: "yes", Usage: "revert, dropping the tables the reverted migrations drop and the data in them; without it, print what would be lost"}
	force := &cli.BoolFlag{Name: "force", Usage: "revert even while jobs are running, whose workers then fail"}
	return &cli.Command{
		Name:  "migrate",
		Usage: "apply, revert and inspect batchq's schema migrations",
		Description: `up, down and status write --format json or csv as other commands do: up writes
schema_version, applied (version, file and duration in seconds of each migration) and
functions (the function files applied); down writes schema_version and reverted, or,
without --yes, schema_version, to_version, would_revert (file names), would_lose (rows
by table) and running. get prints SQL, and grants prints SQL unless --apply: they
refuse --format json and csv.`,
		Subcommands: []*cli.Command{
			{
				Name:   "up",
				Usage:  "apply pending migrations (up to --to), then the function files whose text changed",
				Flags:  []cli.Flag{upTo, commandFormatFlag()},
				Action: withDB(migrateUp),
			},
			{
				Name:   "down",
				Usage:  "revert the latest migration (or down to --to, exclusive); asks for --yes, and refuses while jobs run",
				Flags:  []cli.Flag{downTo, yes, force, commandFormatFlag()},
				Action: withDB(migrateDown),
			},
			{
				Name:   "status",
				Usage:  "list migrations and whether each is applied",
				Flags:  []cli.Flag{commandFormatFlag()},
				Action: withDB(migrateStatus),
			},
			{
				Name:  "get",
				Usage: "print the SQL of one migration, or of the function files, for users who apply it with their own tooling",
				Flags: []cli.Flag{
					int64NoDefault{&cli.Int64Flag{Name: "version", Usage: "required unless --functions: the migration's version number"}},
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

// withDB opens --database-url for run and closes it after.
func withDB(run func(*cli.Context, *sql.DB) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		url, err := databaseURL(c)
		if err != nil {
			return err
		}
		db, err := openSQL(url)
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
// only after connecting, as if the database were at fault, or, beyond the
// last migration, do nothing and succeed.
func checkTo(c *cli.Context) error {
	if !c.IsSet("to") {
		return nil
	}
	v := c.Int64("to")
	if v < 0 {
		return usagef("batchq: --to %d: must be a version, 0 or more", v)
	}
	if v == 0 && c.Command.Name == "up" {
		return usagef("batchq: --to 0: must be a version to apply, 1 or more")
	}
	last, err := lastMigration()
	if err != nil {
		return err
	}
	if v > last {
		return usagef("batchq: --to %d: no such migration; the last is %d", v, last)
	}
	return nil
}

// lastMigration is the version of the last migration this binary holds.
func lastMigration() (int64, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return 0, err
	}
	var last int64
	for _, name := range names {
		digits, _, _ := strings.Cut(name, "_")
		v, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("batchq: migration %s: no version number", name)
		}
		last = max(last, v)
	}
	return last, nil
}

func migrateUp(c *cli.Context, db *sql.DB) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if err := checkTo(c); err != nil {
		return err
	}
	if _, err := outputFormat(c); err != nil {
		return err
	}
	to := goose.MaxVersion
	if c.IsSet("to") {
		to = c.Int64("to")
	}
	res, err := migrations.UpTo(c.Context, db, to)
	if werr := writeMigrateResult(c, res, "applied"); err == nil {
		err = werr
	}
	return err
}

func migrateDown(c *cli.Context, db *sql.DB) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if err := checkTo(c); err != nil {
		return err
	}
	if _, err := outputFormat(c); err != nil {
		return err
	}
	p, err := migrations.NewProvider(db)
	if err != nil {
		return err
	}
	v, err := p.GetDBVersion(c.Context)
	if err != nil {
		return fmt.Errorf("batchq: schema version: %w", err)
	}
	to := max(v-1, 0)
	if c.IsSet("to") {
		to = c.Int64("to")
	}
	if to > v {
		// goose would revert nothing and succeed, as if it had gone down.
		return usagef("batchq: --to %d: must be at most the schema's version, %d; migrate down only reverts", to, v)
	}
	if to < v {
		if err := confirmDown(c, db, p, v, to); err != nil {
			return err
		}
	}
	res, err := migrations.DownTo(c.Context, db, to)
	if werr := writeMigrateResult(c, res, "reverted"); err == nil {
		err = werr
	}
	return err
}

// confirmDown lets a revert from version v down to version to go ahead only
// with --yes, and while jobs run only with --force as well. Without --yes it
// prints the migrations it would revert and the data their Down sections
// would drop, and fails.
func confirmDown(c *cli.Context, db *sql.DB, p *goose.Provider, v, to int64) error {
	st, err := p.Status(c.Context)
	if err != nil {
		return fmt.Errorf("batchq: migrate down: %w", err)
	}
	var reverted []string
	dropped := map[string]bool{}
	for i := len(st) - 1; i >= 0; i-- {
		s := st[i]
		if s.State != goose.StateApplied || s.Source.Version <= to {
			continue
		}
		name := path.Base(s.Source.Path)
		reverted = append(reverted, name)
		b, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			return err
		}
		for _, t := range droppedTables(section(string(b), "-- +goose Down")) {
			dropped[t] = true
		}
	}
	lost, running, err := countLoss(c, db, dropped)
	if err != nil {
		return err
	}
	if !c.Bool("yes") {
		if err := writeDownPreview(c, v, to, reverted, lost, running); err != nil {
			return err
		}
		return usagef("batchq: migrate down: reverting version %d down to %d drops the tables and data listed above; add --yes to go ahead", v, to)
	}
	if running > 0 && !c.Bool("force") {
		return fmt.Errorf("batchq: migrate down: %s running; stop the workers first, or add --force", howMany(running, "job is", "jobs are"))
	}
	return nil
}

// dropAllTables is the table name droppedTables gives for DROP SCHEMA batchq.
const dropAllTables = "*"

var (
	dropTableSQL  = regexp.MustCompile(`(?im)^\s*DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?batchq\.(\w+)`)
	dropSchemaSQL = regexp.MustCompile(`(?im)^\s*DROP\s+SCHEMA\s+(?:IF\s+EXISTS\s+)?batchq\b`)
)

// droppedTables are the tables of schema batchq the SQL drops, or
// dropAllTables when it drops the schema.
func droppedTables(sql string) []string {
	var tables []string
	for _, m := range dropTableSQL.FindAllStringSubmatch(sql, -1) {
		tables = append(tables, strings.ToLower(m[1]))
	}
	if dropSchemaSQL.MatchString(sql) {
		tables = append(tables, dropAllTables)
	}
	return tables
}

// writeDownPreview says what migrate down from version v to version to
// would revert and lose, and how many jobs run now.
func writeDownPreview(c *cli.Context, v, to int64, reverted []string, lost []loss, running int64) error {
	f, err := outputFormat(c)
	if err != nil {
		return err
	}
	if f != formatTable {
		byTable := map[string]int64{}
		for _, l := range lost {
			byTable[l.table] = l.rows
		}
		d := newDataset("schema_version", "to_version", "would_revert", "would_lose", "running")
		d.add(v, to, jsonCell(append([]string{}, reverted...)), jsonCell(byTable), running)
		return writeRecord(c, d)
	}
	w := c.App.Writer
	for _, name := range reverted {
		fmt.Fprintf(w, "would revert %s\n", name)
	}
	if len(lost) == 0 {
		fmt.Fprintln(w, "would lose no jobs, outcomes, queues, tenants, tenant settings in queues, quota rows or schedules")
	} else {
		words := make([]string, len(lost))
		for i, l := range lost {
			words[i] = l.words
		}
		fmt.Fprintf(w, "would lose, with the tables it drops: %s\n", strings.Join(words, ", "))
	}
	if running > 0 && !c.Bool("force") {
		fmt.Fprintf(w, "%s running now: stop the workers first, or add --force as well\n", howMany(running, "job is", "jobs are"))
	}
	return nil
}

// lossTables are the tables whose rows confirmDown counts, and what it
// calls a row of each. batchq.jobs holds the unfinished jobs only.
var lossTables = []struct{ table, one, many string }{
	{"jobs", "unfinished job", "unfinished jobs"},
	{"outcomes", "outcome", "outcomes"},
	{"queues", "queue", "queues"},
	{"tenants", "tenant", "tenants"},
	{"queue_tenants", "tenant setting in a queue", "tenant settings in queues"},
	{"quota", "quota row", "quota rows"},
	{"schedules", "schedule", "schedules"},
}

// loss is what dropping one of lossTables would lose: its rows, counted
// and in words ("2 unfinished jobs").
type loss struct {
	table, words string
	rows         int64
}

// countLoss counts the rows of lossTables that dropping the tables in
// dropped would lose, and the jobs running now. Each table is looked up with
// to_regclass first: a schema at any version has some of them, or none.
func countLoss(c *cli.Context, db *sql.DB, dropped map[string]bool) (lost []loss, running int64, err error) {
	tx, err := db.BeginTx(c.Context, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, 0, fmt.Errorf("batchq: migrate down: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	exists := func(table string) (bool, error) {
		var ok bool
		err := tx.QueryRowContext(c.Context, `SELECT to_regclass($1) IS NOT NULL`, "batchq."+table).Scan(&ok)
		return ok, err
	}
	for _, t := range lossTables {
		if !dropped[t.table] && !dropped[dropAllTables] {
			continue
		}
		ok, err := exists(t.table)
		if err != nil {
			return nil, 0, fmt.Errorf("batchq: migrate down: %w", err)
		}
		if !ok {
			continue
		}
		var n int64
		// t.table is one of lossTables' names, not input.
		if err := tx.QueryRowContext(c.Context, `SELECT count(*) FROM batchq.`+t.table).Scan(&n); err != nil {
			return nil, 0, fmt.Errorf("batchq: migrate down: counting batchq.%s: %w", t.table, err)
		}
		lost = append(lost, loss{table: t.table, words: howMany(n, t.one, t.many), rows: n})
	}
	ok, err := exists("jobs")
	if err != nil {
		return nil, 0, fmt.Errorf("batchq: migrate down: %w", err)
	}
	if ok {
		err := tx.QueryRowContext(c.Context, `SELECT count(*) FROM batchq.jobs WHERE state = 'running'`).Scan(&running)
		if err != nil {
			return nil, 0, fmt.Errorf("batchq: migrate down: counting running jobs: %w", err)
		}
	}
	return lost, running, nil
}

// howMany says n of something: "1 outcome", "3 outcomes".
func howMany(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// writeMigrateResult says what a migration run did (verb: applied or
// reverted), then the version it left: a line each, or as JSON or CSV
// schema_version, the migrations under the verb's name (version, file and
// duration of each) and, for up, the function files applied. A run that
// failed before it did anything (res nil) writes nothing.
func writeMigrateResult(c *cli.Context, res *migrations.Result, verb string) error {
	if res == nil {
		return nil
	}
	f, err := outputFormat(c)
	if err != nil {
		return err
	}
	if f == formatTable {
		for _, r := range res.Migrations {
			fmt.Fprintf(c.App.Writer, "%s %s (%s)\n", verb, r.Source.Path, r.Duration.Round(1e6))
		}
		for _, file := range res.Functions {
			fmt.Fprintf(c.App.Writer, "applied db/functions/%s\n", file)
		}
		_, err := fmt.Fprintf(c.App.Writer, "schema version %d\n", res.Version)
		return err
	}
	type migration struct {
		Version  int64       `json:"version"`
		File     string      `json:"file"`
		Duration json.Number `json:"duration"`
	}
	ms := []migration{}
	for _, r := range res.Migrations {
		ms = append(ms, migration{r.Source.Version, r.Source.Path, json.Number(seconds(r.Duration))})
	}
	if verb == "reverted" {
		d := newDataset("schema_version", "reverted")
		d.add(res.Version, jsonCell(ms))
		return writeRecord(c, d)
	}
	d := newDataset("schema_version", "applied", "functions")
	d.add(res.Version, jsonCell(ms), jsonCell(append([]string{}, res.Functions...)))
	return writeRecord(c, d)
}

// jsonCell is v as a cell of raw JSON: nested in JSON output, a cell of
// compact JSON in CSV.
func jsonCell(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("jsonCell: %v", err))
	}
	return b
}

func migrateStatus(c *cli.Context, db *sql.DB) error {
	if _, err := commandArgs(c); err != nil {
		return err
	}
	p, err := migrations.NewProvider(db)
	if err != nil {
		return err
	}
	// goose would create its version table to read it: status only reads,
	// and a database without the table has every migration pending.
	var versioned bool
	if err := db.QueryRowContext(c.Context, `SELECT to_regclass($1) IS NOT NULL`, migrations.TableName).Scan(&versioned); err != nil {
		return fmt.Errorf("batchq: migrate status: %w", err)
	}
	var st []*goose.MigrationStatus
	if versioned {
		if st, err = p.Status(c.Context); err != nil {
			return fmt.Errorf("batchq: migrate status: %w", err)
		}
	} else {
		for _, src := range p.ListSources() {
			st = append(st, &goose.MigrationStatus{Source: src, State: goose.StatePending})
		}
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
	if _, err := commandArgs(c); err != nil {
		return err
	}
	if err := textOnly(c, "migrate get", "it prints SQL, which is text only"); err != nil {
		return err
	}
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

// textOnly refuses a --format other than table (given to the command or
// before it, or in BATCHQ_FORMAT) for a command whose output has no JSON or
// CSV form, rather than print text a program would fail to parse; why says
// what it prints ("it prints SQL, which is text only").
func textOnly(c *cli.Context, command, why string) error {
	f, err := outputFormat(c)
	if err != nil {
		return err
	}
	if f != formatTable {
		return usagef("batchq: %s: --format %s: %s; leave --format and BATCHQ_FORMAT "+
			"unset, or give --format table", command, f, why)
	}
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
