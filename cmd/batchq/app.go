package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

// defaultDatabaseURL is the local server every command uses when neither
// --database-url nor DATABASE_URL says otherwise.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// databaseURLEnv is the environment variable of --database-url.
const databaseURLEnv = "DATABASE_URL"

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
				EnvVars: []string{databaseURLEnv},
				Value:   defaultDatabaseURL,
			},
			globalFormatFlag(),
		},
		Commands: []*cli.Command{
			migrateCommand(),
			queuesCommand(),
			tenantsCommand(),
			enqueueCommand(),
			schedulesCommand(),
			jobsCommand(),
			reportCommand(),
			pruneCommand(),
			workCommand(),
			demoCommand(),
			consoleCommand(),
			benchCommand(),
			benchWorkerCommand(),
		},
		// Errors are printed once, by exitCode, not by the library.
		ExitErrHandler: func(*cli.Context, error) {},
		CommandNotFound: func(c *cli.Context, name string) {
			unknown = unknownCommand(c, name)
		},
		After: func(*cli.Context) error { return unknown },
	}
	app.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return flagError("", app.Flags, err)
	}
	globalStrings(app.Flags)
	for _, cmd := range app.Commands {
		prepareCommand(cmd, cmd.Name)
	}
	// urfave/cli adds the app's --help only along with its own help command.
	app.Commands = append(app.Commands, helpCommand("help"))
	app.Flags = append(app.Flags, cli.HelpFlag)
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

// prepareCommand makes a flag parsing error of cmd or any of its
// subcommands a usageError in batchq's words (flagError), makes the
// server's permission denied name the command (path, like "queues
// create"), and gives each the help it can have.
//
// urfave/cli adds a help subcommand, "help" with the alias "h", to every
// command. In a command that takes arguments it would take the argument's
// place: `batchq queues create h` would print the help and create nothing,
// and `batchq tenants set h --weight 2` would fail as help's own usage
// error. Such commands get none: their --help still works, and `batchq
// queues help create` too. They also read their whole command line in
// commandArgs (SkipFlagParsing), because the flag package drops the "--" of
// `batchq queues create -- -x` and would leave "-x" to be taken for a flag.
// Command groups and commands without arguments get batchq's own help
// command, whose usage errors are one line like every other.
func prepareCommand(cmd *cli.Command, path string) {
	decimal(cmd.Flags)
	cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return flagError(path, cmd.Flags, err)
	}
	if action := cmd.Action; action != nil {
		cmd.Action = func(c *cli.Context) error { return fromEnvironment(c, deniedTo(path, action(c))) }
	}
	for _, sub := range cmd.Subcommands {
		prepareCommand(sub, path+" "+sub.Name)
	}
	if len(cmd.Subcommands) == 0 {
		// With a help command of its own, urfave/cli would print a command
		// without subcommands with its group's template.
		cmd.CustomHelpTemplate = cli.CommandHelpTemplate
	}
	if len(cmd.Subcommands) == 0 && (cmd.ArgsUsage != "" || cmd.SkipFlagParsing) {
		cmd.HideHelpCommand = true
		cmd.SkipFlagParsing = true
		return
	}
	cmd.Subcommands = append(cmd.Subcommands, helpCommand(path+" help"))
}

// helpCommand stands in for urfave/cli's help command, which prints its
// usage errors with the whole help after them, on standard output.
func helpCommand(path string) *cli.Command {
	help := &cli.Command{
		Name:            "help",
		Aliases:         []string{"h"},
		Usage:           "Shows a list of commands or help for one command",
		ArgsUsage:       "[command]",
		HideHelpCommand: true,
		Action:          showHelp,
	}
	help.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
		return flagError(path, help.Flags, err)
	}
	return help
}

// showHelp prints the help of the command help was given to, or of the
// subcommand named after it: `batchq help`, `batchq help migrate`,
// `batchq migrate help up`.
func showHelp(c *cli.Context) error {
	lineage := c.Lineage()
	parent := lineage[1]
	if name := c.Args().First(); name != "" {
		// An unknown name goes to CommandNotFound, which fails the run.
		return cli.ShowCommandHelp(parent, name)
	}
	if up := parent.Lineage(); len(up) < 2 || up[1].App == nil {
		return cli.ShowAppHelp(parent)
	}
	return cli.ShowSubcommandHelp(parent)
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
	case "42703": // undefined_column: batchq's queries name only batchq's columns, which an older schema lacks
		return true
	}
	return false
}

// deniedError is a command's error that the server refused as permission
// denied: the connected role lacks a right the command needs.
type deniedError struct {
	command string // like "queues create"
	err     error
}

func (e *deniedError) Error() string { return e.err.Error() }

func (e *deniedError) Unwrap() error { return e.err }

// deniedTo marks err as command's if the server refused it with
// insufficient_privilege; any other error is returned as it is.
func deniedTo(command string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return &deniedError{command: command, err: err}
	}
	return err
}

// commandRoles says who may run each command that reaches the database,
// among the roles 'batchq migrate grants' makes and the schema's owner, as
// docs/operating.md and sql-api.md#roles list them. A command missing here
// (demo and bench make databases of their own) is named without a role.
var commandRoles = map[string]string{
	"migrate up":       "the schema's owner",
	"migrate down":     "the schema's owner",
	"migrate status":   "the schema's owner",
	"migrate grants":   "the schema's owner, if it may create roles, or a superuser",
	"queues create":    "the schema's owner",
	"queues set":       "the schema's owner",
	"queues pause":     "the operator role or the schema's owner",
	"queues resume":    "the operator role or the schema's owner",
	"queues delete":    "the operator role or the schema's owner",
	"queues list":      "any of the app, worker and operator roles, or the schema's owner",
	"tenants set":      "the schema's owner",
	"tenants unset":    "the schema's owner",
	"tenants list":     "the app or the operator role, or the schema's owner",
	"schedules create": "the schema's owner",
	"schedules set":    "the schema's owner",
	"schedules pause":  "the schema's owner",
	"schedules resume": "the schema's owner",
	"schedules delete": "the schema's owner",
	"schedules list":   "the operator role or the schema's owner",
	"enqueue":          "the app role or the schema's owner",
	"jobs show":        "the operator role or the schema's owner",
	"jobs cancel":      "the operator role or the schema's owner",
	"jobs retry":       "the schema's owner",
	"report backlog":   "the app or the operator role, or the schema's owner",
	"report tenants":   "the app or the operator role, or the schema's owner",
	"report outcomes":  "the app or the operator role, or the schema's owner",
	"report quota":     "any of the app, worker and operator roles, or the schema's owner",
	"prune":            "the schema's owner",
	"work":             "the worker role or the schema's owner",
	"console":          "any of the app, worker and operator roles, or the schema's owner",
}

// deniedHint says, after the server's permission denied, which role may run
// the command, and where the roles come from. A bench scenario works in a
// database it creates and so owns: no grant applies, and what it needs
// (CREATEDB) its own error says.
func deniedHint(d *deniedError) string {
	if strings.HasPrefix(d.command, "bench ") {
		return ""
	}
	hint := "; the connected role lacks a right 'batchq " + d.command + "' needs"
	if who := commandRoles[d.command]; who != "" {
		hint += ": run it as " + who
	}
	return hint + " (see 'batchq migrate grants --help', and re-run grants after each 'batchq migrate up')"
}

// exitCode prints err on one line, as oneLine writes it, and maps it to the
// process exit code: 0 success, 2 usage, 1 anything else.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	if !strings.HasPrefix(msg, "batchq") {
		msg = "batchq: " + msg
	}
	var denied *deniedError
	switch {
	case notMigrated(err):
		msg += "; is the database migrated? run 'batchq migrate up'"
	case errors.As(err, &denied):
		msg += deniedHint(denied)
	}
	// Errors name what they refused (a tenant, a kind, a worker): shown as
	// tables show them, a name cannot turn the message around.
	fmt.Fprintln(stderr, oneLine(msg))
	var u usageError
	switch {
	case errors.As(err, &u), errors.Is(err, queue.ErrUnknownQueue), errors.Is(err, queue.ErrNotFound),
		errors.Is(err, queue.ErrScheduleNotFound):
		// The command line named something that is not there.
		return 2
	case errors.Is(err, queue.ErrQueuePaused):
		// work --drain of a paused queue: not a failure, and not drained.
		return exitPaused
	}
	return 1
}

// exitPaused is the exit code of `batchq work --drain` for a queue that is
// paused: the jobs it could run are done, the queue is not drained.
const exitPaused = 3
