package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// noServer is a database URL nothing answers on: a command run with it
// fails to connect, unless the command line was wrong first.
const noServer = "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"

// Any name a queue or tenant may have is a name on the command line: h and
// help are not the help command, and after "--" a name may start with "-".
func TestNamesLikeHelpOrFlagsAreNames(t *testing.T) {
	t.Parallel()
	db := newCLIDB(t)
	for _, args := range [][]string{
		{"queues", "create", "h"},
		{"queues", "create", "help"},
		{"queues", "create", "--quantum", "7", "--", "hq"},
		{"tenants", "set", "h", "--weight", "2"},
		{"tenants", "set", "help", "--weight", "2"},
		{"tenants", "set", "--weight", "2", "--", "-acme"},
		{"tenants", "set", "--weight", "2", "--", "--help"},
	} {
		r := runCLI(t, db.url, args...)
		require.Equal(t, 0, r.code, "%q: %s", args, r.stderr)
		require.NotContains(t, r.stdout, "USAGE:", "%q", args)
	}
	require.Equal(t, int64(3), db.count(t, `SELECT count(*) FROM batchq.queues WHERE name IN ('h', 'help', 'hq')`))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.queues WHERE name = 'hq' AND quantum = 7`))
	require.Equal(t, int64(4), db.count(t, `SELECT count(*) FROM batchq.tenants WHERE name IN ('h', 'help', '-acme', '--help') AND weight = 2`))

	r := runCLI(t, db.url, "jobs", "show", "h")
	require.Equal(t, 2, r.code)
	require.Equal(t, "batchq: job id \"h\": must be a positive integer\n", r.stderr)
}

// Every command that takes an argument takes h, help and "-- h" as that
// argument: none prints its help, each fails to connect (or refuses the
// argument) on one line.
func TestEveryCommandWithAnArgumentTakesHelpAsIt(t *testing.T) {
	t.Parallel()
	var paths [][]string
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			path := append(append([]string(nil), prefix...), c.Name)
			if len(c.Subcommands) > 0 {
				walk(path, c.Subcommands)
			} else if c.ArgsUsage != "" && !c.Hidden && c.Name != "help" {
				paths = append(paths, path)
			}
		}
	}
	walk(nil, newApp(io.Discard, io.Discard).Commands)
	require.GreaterOrEqual(t, len(paths), 6, "queues create and set, tenants set, jobs show, cancel and retry at least")
	for _, path := range paths {
		for _, name := range [][]string{{"h"}, {"help"}, {"--", "h"}} {
			args := append(append([]string(nil), path...), name...)
			r := runCLI(t, noServer, args...)
			require.NotEqual(t, 0, r.code, "%q printed: %s", args, r.stdout)
			require.NotContains(t, r.stdout, "USAGE:", "%q", args)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "%q: one line: %q", args, r.stderr)
		}
	}
}

// A wrong command line is one line on standard error and exit code 2, even
// where it reaches a help command.
func TestUsageErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"tenants", "set", "h", "--weight"}, "batchq: tenants set: --weight needs a value: a decimal number\n"},
		{[]string{"tenants", "set", "acme", "--colour", "red"}, "batchq: tenants set: flag provided but not defined: --colour\n"},
		{[]string{"queues", "create", "--colour", "red", "q"}, "batchq: queues create: flag provided but not defined: --colour\n"},
		{[]string{"queues", "create", "--", "a", "b"}, "batchq: queues create: unexpected argument \"b\"; usage: batchq queues create NAME\n"},
		{[]string{"help", "--colour"}, "batchq: help: flag provided but not defined: --colour\n"},
		{[]string{"queues", "help", "--colour"}, "batchq: queues help: flag provided but not defined: --colour\n"},
		{[]string{"enqueue", "help", "--queue", "q"}, "batchq: enqueue help: flag provided but not defined: --queue\n"},
		{[]string{"migrate", "up", "now"}, "batchq: migrate up: unexpected argument \"now\"; usage: batchq migrate up\n"},
	} {
		r := runCLI(t, noServer, tc.args...)
		require.Equal(t, 2, r.code, "%q: %s", tc.args, r.stderr)
		require.Equal(t, tc.msg, r.stderr, "%q", tc.args)
		require.Empty(t, r.stdout, "%q", tc.args)
	}
}

// A value the flag package refuses names the flag with its two dashes, the
// value and what the flag takes, and a flag given no value says what it
// needs, in the same words whether urfave/cli read the flag or it came
// after the arguments (setTrailingFlag).
func TestFlagParseErrorsNameTheFlagAndWhatItTakes(t *testing.T) {
	t.Parallel()
	enqueue := []string{"enqueue", "--queue", "q", "--tenant", "t"}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{append(enqueue, "--cost", "1.5"), `batchq: --cost "1.5": not a whole number` + "\n"},
		{append(enqueue, "--cost"), "batchq: enqueue: --cost needs a value: a whole number\n"},
		{append(enqueue, "--cost", "9223372036854775808"), `batchq: --cost "9223372036854775808": out of range for a whole number` + "\n"},
		{append(enqueue, "--cost", "1", "--ttl", "soon"), `batchq: --ttl "soon": not a duration like 90m, 36h or 30d` + "\n"},
		{append(enqueue, "--cost", "1", "--kind"), "batchq: enqueue: --kind needs a value\n"},
		{append(enqueue, "--cost", "1", "--colour", "red"), "batchq: enqueue: flag provided but not defined: --colour\n"},
		{[]string{"queues", "create", "--quantum", "1.5", "q"}, `batchq: --quantum "1.5": not a whole number` + "\n"},
		{[]string{"queues", "create", "q", "--quantum", "1.5"}, `batchq: --quantum "1.5": not a whole number` + "\n"},
		{[]string{"queues", "create", "q", "--quantum"}, "batchq: queues create: --quantum needs a value: a whole number\n"},
		{[]string{"tenants", "set", "acme", "--weight", "heavy"}, `batchq: --weight "heavy": not a decimal number` + "\n"},
		// Go reads these as numbers; a weight typed so is a slip, not 2, 10 or NaN.
		{[]string{"tenants", "set", "acme", "--weight", "0x1p1"}, `batchq: --weight "0x1p1": not a decimal number` + "\n"},
		{[]string{"tenants", "set", "acme", "--weight", "1_0"}, `batchq: --weight "1_0": not a decimal number` + "\n"},
		{[]string{"tenants", "set", "acme", "--weight", "NaN"}, `batchq: --weight "NaN": not a decimal number` + "\n"},
		{[]string{"work", "--queue", "q", "--target", "http://127.0.0.1:1/", "--reserve", "Inf"}, `batchq: --reserve "Inf": not a decimal number` + "\n"},
		{[]string{"demo", "--speed", "0x10"}, `batchq: --speed "0x10": not a decimal number` + "\n"},
		// Not 0, which with --queue would mean "no weight of its own here".
		{[]string{"tenants", "set", "acme", "--queue", "q", "--weight", "1e-400"}, `batchq: --weight "1e-400": out of range for a decimal number` + "\n"},
		{[]string{"work", "--queue", "q", "--target", "http://127.0.0.1:1/", "--timeout", "soon"}, `batchq: --timeout "soon": not a duration like 90s, 5m or 2h` + "\n"},
		{[]string{"work", "--queue", "q", "--target", "http://127.0.0.1:1/", "--drain=maybe"}, `batchq: --drain "maybe": not true or false` + "\n"},
		{[]string{"work", "--concurrency"}, "batchq: work: --concurrency needs a value: a whole number\n"},
		{[]string{"demo", "--seed", "-1"}, `batchq: --seed "-1": not a whole number, 0 or more` + "\n"},
		{[]string{"--colour"}, "batchq: flag provided but not defined: --colour\n"},
	} {
		r := runCLI(t, noServer, tc.args...)
		require.Equal(t, 2, r.code, "%q: %s", tc.args, r.stderr)
		require.Equal(t, tc.msg, r.stderr, "%q", tc.args)
		require.Empty(t, r.stdout, "%q", tc.args)
	}
}

// A flag's environment variable that does not parse is refused as the flag
// itself is, naming the variable, not with the flag package's and strconv's
// words. Not parallel: it sets the environment.
func TestFlagEnvironmentErrorsNameTheVariable(t *testing.T) {
	work := []string{"work", "--queue", "q", "--target", "http://127.0.0.1:1/"}
	for _, tc := range []struct{ env, value, msg string }{
		{"BATCHQ_CONCURRENCY", "x", `batchq: BATCHQ_CONCURRENCY "x" (for --concurrency): not a whole number`},
		{"BATCHQ_CONCURRENCY", "99999999999999999999", `batchq: BATCHQ_CONCURRENCY "99999999999999999999" (for --concurrency): out of range for a whole number`},
		{"BATCHQ_RESERVE", "lots", `batchq: BATCHQ_RESERVE "lots" (for --reserve): not a decimal number`},
		{"BATCHQ_RESERVE", "0x.8p0", `batchq: BATCHQ_RESERVE "0x.8p0" (for --reserve): not a decimal number`},
		{"BATCHQ_RESERVE", "1e400", `batchq: BATCHQ_RESERVE "1e400" (for --reserve): out of range for a decimal number`},
		{"BATCHQ_RESERVE", "1e-400", `batchq: BATCHQ_RESERVE "1e-400" (for --reserve): out of range for a decimal number`},
		{"BATCHQ_METRICS_ADDR", "9090", `batchq: BATCHQ_METRICS_ADDR "9090" (for --metrics-addr): must be HOST:PORT or :PORT`},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			r := runCLI(t, noServer, work...)
			require.Equal(t, 2, r.code, r.stderr)
			require.Equal(t, tc.msg+"\n", r.stderr)
		})
	}
}

// A value a flag's rule refuses is refused in the flag's words, saying
// which environment variable set it when the command line did not give the
// flag (the command line wins over the variable, and is named alone). The
// value is shown as the flag's message shows it: a URL without its
// credentials. Not parallel: it sets the environment.
func TestFlagEnvironmentValuesRefusedNameTheVariable(t *testing.T) {
	work := []string{"work", "--queue", "q", "--target", "http://127.0.0.1:1/"}
	with := func(more ...string) []string { return append(slices.Clone(work), more...) }
	for _, tc := range []struct {
		env, value string
		args       []string
		msg        string
	}{
		{"BATCHQ_CONCURRENCY", "0", work, `batchq: --concurrency 0: must be in 1..10000 (set by BATCHQ_CONCURRENCY)`},
		{"BATCHQ_REORDER", "5m", with("--quota-key", "k"), `batchq: --reorder 5m0s: must be in (0s, 1m0s] (set by BATCHQ_REORDER)`},
		{"BATCHQ_TARGET", "ftp://user:s3cret@host/p?api_key=TOPSECRET", []string{"work", "--queue", "q"},
			`batchq: --target "ftp://host/p": must be an http or https URL (set by BATCHQ_TARGET)`},
		{"BATCHQ_BENCH_REPS", "0", []string{"bench", "drain"}, `batchq: bench drain: --reps: must be in 1..100 (got 0) (set by BATCHQ_BENCH_REPS)`},
		{"BATCHQ_FORMAT", "xml", work, `batchq: --format "xml": must be table, json or csv (set by BATCHQ_FORMAT)`},
		{"BATCHQ_WORKER_NAME", "", work, `batchq: BATCHQ_WORKER_NAME (for --name): must not be empty (unset it for host:pid)`},
		{"BATCHQ_TARGET", "http://u:s3cret@host/p q", []string{"work", "--queue", "q"},
			`batchq: --target "http://host/p q": must not contain whitespace or control characters (set by BATCHQ_TARGET)`},
		{"BATCHQ_HEADER_ENV", "Idempotency-Key=BATCHQ_TARGET", work,
			`batchq: --header-env "Idempotency-Key=BATCHQ_TARGET": the worker sets Idempotency-Key itself (set by BATCHQ_HEADER_ENV)`},
		// The command line wins, in every spelling, after a "--" too.
		{"BATCHQ_CONCURRENCY", "0", with("--concurrency", "0"), `batchq: --concurrency 0: must be in 1..10000`},
		{"BATCHQ_CONCURRENCY", "0", with("--concurrency=0"), `batchq: --concurrency 0: must be in 1..10000`},
		{"BATCHQ_CONCURRENCY", "5", with("-concurrency", "0"), `batchq: --concurrency 0: must be in 1..10000`},
		{"BATCHQ_CONCURRENCY", "5", with("--", "--concurrency", "0"), `batchq: --concurrency 0: must be in 1..10000`},
		{"BATCHQ_METRICS_ADDR", "nope", with("--metrics-addr", "nope"), `batchq: --metrics-addr "nope": must be HOST:PORT or :PORT`},
	} {
		t.Run(tc.env+"="+tc.value+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			r := runCLI(t, noServer, tc.args...)
			require.Equal(t, 2, r.code, r.stderr)
			require.Equal(t, tc.msg+"\n", r.stderr)
			require.NotContains(t, r.stderr, "s3cret")
		})
	}
}

// The app's own flags, given before the command, win over their variables
// as a command's flags do: a value typed there is refused without blaming
// the variable, which is named only when it gave the value. Not parallel: it
// sets the environment.
func TestGlobalFlagsOnTheCommandLineAreNotBlamedOnTheVariable(t *testing.T) {
	badURL := "postgres://u:s3cret@127.0.0.1:1/x?sslmode=bogus"
	badURLMsg := "batchq: --database-url: cannot parse `postgres://u:xxxxx@127.0.0.1:1/x?sslmode=bogus`: " +
		"failed to configure TLS (sslmode is invalid)"
	for _, tc := range []struct {
		env, value string
		args       []string
		msg        string
	}{
		{"BATCHQ_FORMAT", "json", []string{"--format", "xml"}, `batchq: --format "xml": must be table, json or csv`},
		{"BATCHQ_FORMAT", "json", []string{"--format=xml"}, `batchq: --format "xml": must be table, json or csv`},
		{"BATCHQ_FORMAT", "json", []string{"-format", "xml"}, `batchq: --format "xml": must be table, json or csv`},
		// The same value in both: the command line gave it all the same.
		{"BATCHQ_FORMAT", "xml", []string{"--format", "xml"}, `batchq: --format "xml": must be table, json or csv`},
		{"BATCHQ_FORMAT", "xml", nil, `batchq: --format "xml": must be table, json or csv (set by BATCHQ_FORMAT)`},
		{"DATABASE_URL", noServer, []string{"--database-url", badURL}, badURLMsg},
		{"DATABASE_URL", badURL, nil, badURLMsg + " (set by DATABASE_URL)"},
		{"DATABASE_URL", noServer, []string{"--database-url", ""}, `batchq: --database-url "": empty; give a URL, ` +
			"or leave --database-url out for DATABASE_URL or the default, " + defaultDatabaseURL},
		{"DATABASE_URL", "", []string{"--database-url", ""}, `batchq: --database-url "": empty; give a URL, ` +
			"or leave --database-url out for DATABASE_URL or the default, " + defaultDatabaseURL},
	} {
		t.Run(tc.env+"="+tc.value+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			r := runCLI(t, "", append(slices.Clone(tc.args), "queues", "list")...)
			require.Equal(t, 2, r.code, r.stderr)
			require.Equal(t, tc.msg+"\n", r.stderr)
			require.NotContains(t, r.stderr, "s3cret")
		})
	}
}

// connectingCommands are command lines that reach the database, one for
// each way a command connects: a queue client, migrate's database/sql,
// grants --apply, work, console, demo and bench.
var connectingCommands = [][]string{
	{"queues", "list"},
	{"enqueue", "--queue", "q", "--tenant", "t", "--cost", "1"},
	{"jobs", "show", "1"},
	{"report", "backlog"},
	{"prune", "--older-than", "30d"},
	{"migrate", "up"},
	{"migrate", "status"},
	{"migrate", "grants", "--apply"},
	{"work", "--queue", "q", "--target", "http://127.0.0.1:1/"},
	{"console", "--addr", "127.0.0.1:0"},
	{"demo", "--console-addr", ""},
	{"bench", "scale"},
}

// An empty --database-url is refused, not handed to pgx, which would take
// it for libpq's defaults (the local socket, and the database named after
// the OS user) rather than the documented default.
func TestEmptyDatabaseURLIsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range connectingCommands {
		for _, url := range []string{"", "  "} {
			r := runCLI(t, "", append([]string{"--database-url", url}, args...)...)
			require.Equal(t, 2, r.code, "%q: %s", args, r.stderr)
			require.Equal(t, `batchq: --database-url "`+url+`": empty; give a URL, or leave --database-url out `+
				"for DATABASE_URL or the default, "+defaultDatabaseURL+"\n", r.stderr, "%q", args)
			require.Empty(t, r.stdout, "%q", args)
		}
	}
}

// DATABASE_URL set but empty is refused naming the variable: it is more
// likely a variable that lost its value than a wish for libpq's defaults.
// Not parallel: it sets the environment.
func TestEmptyDatabaseURLVariableIsRefused(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	for _, args := range connectingCommands {
		r := runCLI(t, "", args...)
		require.Equal(t, 2, r.code, "%q: %s", args, r.stderr)
		require.Equal(t, `batchq: DATABASE_URL "" (for --database-url): empty; give a URL, or unset DATABASE_URL `+
			"for the default, "+defaultDatabaseURL+"\n", r.stderr, "%q", args)
		require.Empty(t, r.stdout, "%q", args)
	}
	// Given on the command line, the flag wins over the empty variable.
	r := runCLI(t, noServer, "queues", "list")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "failed to connect to `user=nobody database=none`")
}

// Help is where it was: the app's, a group's and a command's, by the help
// command and by --help, before or after the arguments.
func TestHelpStillWorks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		name string // the command whose help it is
	}{
		{nil, "batchq - "},
		{[]string{"help"}, "batchq - "},
		{[]string{"h"}, "batchq - "},
		{[]string{"--help"}, "batchq - "},
		{[]string{"-h"}, "batchq - "},
		{[]string{"queues"}, "batchq queues - "},
		{[]string{"queues", "help"}, "batchq queues - "},
		{[]string{"queues", "h"}, "batchq queues - "},
		{[]string{"queues", "--help"}, "batchq queues - "},
		{[]string{"help", "queues"}, "batchq queues - "},
		{[]string{"queues", "help", "create"}, "batchq queues create - "},
		{[]string{"queues", "create", "--help"}, "batchq queues create - "},
		{[]string{"queues", "create", "-h"}, "batchq queues create - "},
		{[]string{"queues", "create", "--help", "imports"}, "batchq queues create - "},
		{[]string{"queues", "create", "imports", "--help"}, "batchq queues create - "},
		{[]string{"tenants", "set", "acme", "--weight", "2", "-h"}, "batchq tenants set - "},
		{[]string{"jobs", "show", "--help"}, "batchq jobs show - "},
		{[]string{"enqueue", "--help"}, "batchq enqueue - "},
		{[]string{"enqueue", "help"}, "batchq enqueue - "},
		{[]string{"help", "enqueue"}, "batchq enqueue - "},
		{[]string{"migrate", "help", "down"}, "batchq migrate down - "},
	} {
		r := runCLI(t, noServer, tc.args...)
		require.Equal(t, 0, r.code, "%q: %s", tc.args, r.stderr)
		require.Empty(t, r.stderr, "%q", tc.args)
		require.Contains(t, r.stdout, "NAME:\n   "+tc.name, "%q", tc.args)
		require.Contains(t, r.stdout, "USAGE:", "%q", tc.args)
	}
	// A command's help looks as it did: options, and no list of commands.
	r := runCLI(t, noServer, "help", "enqueue")
	require.Contains(t, r.stdout, "USAGE:\n   batchq enqueue [command options]")
	require.NotContains(t, r.stdout, "COMMANDS:")
	r = runCLI(t, noServer, "queues", "help", "create")
	require.Contains(t, r.stdout, "USAGE:\n   batchq queues create [command options] NAME")
	require.NotContains(t, r.stdout, "COMMANDS:")
}

// Whole numbers are decimal everywhere: a leading zero is not octal, and
// 0x, 0o and 0b are not numbers, as a job id on the command line is not.
func TestWholeNumberFlagsAreDecimal(t *testing.T) {
	t.Parallel()
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				switch f.(type) {
				case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
					t.Errorf("%s%s --%s reads Go literals (010 as 8): not made decimal", path, c.Name, f.Names()[0])
				}
			}
			walk(path+c.Name+" ", c.Subcommands)
		}
	}
	walk("", newApp(io.Discard, io.Discard).Commands)

	db := newCLIDB(t)
	r := runCLI(t, db.url, "queues", "create", "dq", "--max-per-tenant", "010", "--quantum=0100")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.queues WHERE name = 'dq' AND max_per_tenant = 10 AND quantum = 100`), r.stdout)
	r = runCLI(t, db.url, "enqueue", "--queue", "dq", "--tenant", "acme", "--cost", "010")
	require.Equal(t, 0, r.code, r.stderr)
	for _, v := range []string{"0x10", "0o10", "0b11", "1_000"} {
		r = runCLI(t, db.url, "enqueue", "--queue", "dq", "--tenant", "acme", "--cost", v)
		require.Equal(t, 2, r.code, "--cost %s: %s", v, r.stdout)
		require.Contains(t, r.stderr, `--cost "`+v+`"`, "--cost %s", v)
		require.Contains(t, r.stderr, "a whole number", "--cost %s", v)
	}
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs`))
	require.Equal(t, int64(1), db.count(t, `SELECT count(*) FROM batchq.jobs WHERE cost = 10`))
}

// A whole number in an environment variable is decimal too.
func TestWholeNumberEnvironmentVariablesAreDecimal(t *testing.T) {
	t.Setenv("BATCHQ_CONCURRENCY", "0x10")
	r := runCLI(t, noServer, "work", "--queue", "q", "--target", "http://127.0.0.1:1/")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "batchq: BATCHQ_CONCURRENCY \"0x10\" (for --concurrency): not a whole number\n", r.stderr)
}
