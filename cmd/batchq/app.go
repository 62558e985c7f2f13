package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/urfave/cli/v2"
)

// defaultDatabaseURL is the local server every command uses when neither
// --database-url nor DATABASE_URL says otherwise.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// usageError marks a mistake in how a command was called; it exits with 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...)}
}

// newApp builds the CLI writing to stdout and stderr, so tests can run any
// command with captured output.
func newApp(stdout, stderr io.Writer) *cli.App {
	// urfave/cli reports a command it does not know through CommandNotFound,
	// which cannot fail the run; After, which runs last, fails it instead.
	var unknown error
	app := &cli.App{
		Name:                 "batchq",
		Usage:                "a Postgres-backed fair work queue for LLM batch jobs",
		Writer:               stdout,
		ErrWriter:            stderr,
		EnableBashCompletion: true,
		HideHelpCommand:      false,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "database-url",
				Usage:   "Postgres connection URL",
				EnvVars: []string{"DATABASE_URL"},
				Value:   defaultDatabaseURL,
			},
			globalFormatFlag(),
		},
		Commands: []*cli.Command{
			migrateCommand(),
			queuesCommand(),
			tenantsCommand(),
			enqueueCommand(),
			jobsCommand(),
			reportCommand(),
			pruneCommand(),
			workCommand(),
			demoCommand(),
			benchCommand(),
			benchWorkerCommand(),
		},
		// Errors are printed once, by exitCode, not by the library.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{msg: err.Error()}
		},
		CommandNotFound: func(c *cli.Context, name string) {
			unknown = unknownCommand(c, name)
		},
		After: func(*cli.Context) error { return unknown },
	}
	for _, cmd := range app.Commands {
		setUsageErrors(cmd)
	}
	return app
}

// unknownCommand is the usage error for name, which is not a command of the
// command c runs (the app itself, or one with subcommands, like migrate).
func unknownCommand(c *cli.Context, name string) error {
	// For `batchq migrate help upp` c is the help command's context.
	parent := ""
	for _, ctx := range c.Lineage() {
		if cmd := ctx.Command; cmd != nil && !cmd.HasName("help") {
			parent = strings.TrimSpace(strings.TrimPrefix(cmd.HelpName, c.App.Name))
			break
		}
	}
	if parent == "" {
		return usagef("batchq: unknown command %q; run 'batchq help'", name)
	}
	return usagef("batchq: unknown command %q; run 'batchq %s help'", parent+" "+name, parent)
}

// setUsageErrors makes a flag parsing error of any subcommand a usageError.
func setUsageErrors(cmd *cli.Command) {
	cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return usageError{msg: err.Error()}
	}
	for _, sub := range cmd.Subcommands {
		setUsageErrors(sub)
	}
}

// notMigrated reports whether err is the server not knowing one of batchq's
// schema, tables or functions: a database nobody ran migrate up on.
func notMigrated(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "3F000", "42P01", "42883": // invalid_schema_name, undefined_table, undefined_function
		return strings.Contains(pe.Message, "batchq")
	}
	return false
}

// exitCode prints err on one line and maps it to the process exit code:
// 0 success, 2 usage, 1 anything else.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	if !strings.HasPrefix(msg, "batchq") {
		msg = "batchq: " + msg
	}
	if notMigrated(err) {
		msg += "; is the database migrated? run 'batchq migrate up'"
	}
	fmt.Fprintln(stderr, msg)
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}
