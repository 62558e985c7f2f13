package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/batchq/batchq/queue"
)

// errHelpShown stops a command whose --help came after its arguments; the
// command then succeeds having done nothing else.
var errHelpShown = errors.New("batchq: help shown")

// withQueueClient runs a command with a queue client on --database-url,
// after checking --format, so a bad format fails before anything is written.
func withQueueClient(run func(*cli.Context, *queue.Client) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if _, err := outputFormat(c); err != nil {
			return err
		}
		client, closeClient, err := openQueueClient(c)
		if err != nil {
			return err
		}
		defer closeClient()
		if err := run(c, client); !errors.Is(err, errHelpShown) {
			return err
		}
		return nil
	}
}

// databaseURL returns --database-url, the one place every command that
// connects reads it. An empty one is refused: pgx would take it for libpq's
// defaults (the local socket, the database named after the OS user), not
// for defaultDatabaseURL, and the command would run on another database.
func databaseURL(c *cli.Context) (string, error) {
	url := c.String("database-url")
	if strings.TrimSpace(url) != "" {
		return url, nil
	}
	instead := "leave --database-url out for " + databaseURLEnv + " or the default"
	if env, ok := flagEnv(c, "database-url"); ok {
		instead = "unset " + env + " for the default"
	}
	return "", usagef("batchq: %s: empty; give a URL, or %s, %s", givenFlag(c, "database-url"), instead, defaultDatabaseURL)
}

// poolConfig parses --database-url (databaseURL) for a pgxpool.
func poolConfig(c *cli.Context) (*pgxpool.Config, error) {
	url, err := databaseURL(c)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("batchq: --database-url: %v", err)
	}
	return cfg, nil
}

// flagEnv returns the environment variable that gave the string flag name
// its value, if one did: one of its variables that is set to that value. A
// value on the command line wins over the variable.
func flagEnv(c *cli.Context, name string) (string, bool) {
	f := findFlag(slices.Concat(c.Command.Flags, c.App.Flags), name)
	if f == nil || givenOnCommandLine(c, f) {
		return "", false // none, or given on the command line, maybe with the variable's value too
	}
	for _, env := range envVarsOf(f) {
		if v, set := os.LookupEnv(env); set && v == c.String(name) {
			return env, true
		}
	}
	return "", false
}

// flagEnvVars lists the environment variables of flag name, if it has any.
func flagEnvVars(c *cli.Context, name string) []string {
	return envVarsOf(findFlag(slices.Concat(c.Command.Flags, c.App.Flags), name))
}

// envVarsOf lists f's environment variables, if it has any (none for nil).
func envVarsOf(f cli.Flag) []string {
	if d, ok := f.(interface{ GetEnvVars() []string }); ok {
		return d.GetEnvVars()
	}
	return nil
}

// onCommandLine says whether flag name was given on the command line, not
// by its environment variable. A variable set for a whole fleet may hold a
// setting some of its commands have no use for; a flag given to one command
// was meant for it.
func onCommandLine(c *cli.Context, name string) bool {
	if !c.IsSet(name) {
		return false
	}
	for _, env := range flagEnvVars(c, name) {
		if _, set := os.LookupEnv(env); set {
			return false
		}
	}
	return true
}

// goesWith refuses the flags of names given on the command line without
// the flag they need (anchor, unset or empty), which they would do nothing
// without; why says what is missing then.
func goesWith(c *cli.Context, anchor, why string, names ...string) error {
	if c.String(anchor) != "" {
		return nil
	}
	for _, name := range names {
		if onCommandLine(c, name) {
			return usagef("batchq: %s: --%s goes with --%s (%s)", c.Command.Name, name, anchor, why)
		}
	}
	return nil
}

// refuseEmpty refuses a string flag given as "", which the API would take
// for its default (the kind "default", no unique key, every queue): on a
// command line an empty value is more likely a variable that was not set
// than a choice, which leaving the flag out makes (instead says so, %s
// standing for the flag's name).
func refuseEmpty(c *cli.Context, instead string, names ...string) error {
	for _, name := range names {
		if c.IsSet(name) && c.String(name) == "" {
			flag := "--" + name
			if env, ok := flagEnv(c, name); ok {
				flag = fmt.Sprintf("%s (for --%s)", env, name)
				instead = strings.Replace(instead, "leave it out", "unset it", 1)
			}
			return usagef("batchq: %s: must not be empty (%s)", flag, strings.ReplaceAll(instead, "%s", name))
		}
	}
	return nil
}

// givenFlag names the string flag name and its value as they were given,
// for an error: --name "value", or VAR "value" (for --name) when its
// environment variable gave it, as envFlagError names a variable.
func givenFlag(c *cli.Context, name string) string {
	if env, ok := flagEnv(c, name); ok {
		return fmt.Sprintf("%s %q (for --%s)", env, c.String(name), name)
	}
	return fmt.Sprintf("--%s %q", name, c.String(name))
}

func openQueueClient(c *cli.Context) (*queue.Client, func(), error) {
	cfg, err := poolConfig(c)
	if err != nil {
		return nil, nil, err
	}
	// A command makes a handful of queries one after another.
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(c.Context, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("batchq: connect: %w", err)
	}
	client, err := queue.NewClient(pool, queue.Config{})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return client, pool.Close, nil
}

// commandArgs returns the command's positional arguments, exactly want of
// them, named by names in errors. urfave/cli v2 stops reading flags at the
// first argument; people type `batchq jobs cancel 42 --reason dup`, so flags
// that follow the arguments are read here. A command that takes arguments
// leaves all its flags to be read here (prepareCommand), so that everything
// after a "--" is an argument, even one that starts with "-".
func commandArgs(c *cli.Context, names ...string) ([]string, error) {
	return commandArgsAtLeast(c, len(names), names...)
}

// commandArgsAtLeast is commandArgs for a command whose arguments after the
// first required ones may be left out.
func commandArgsAtLeast(c *cli.Context, required int, names ...string) ([]string, error) {
	var args []string
	rest := c.Args().Slice()
	for len(rest) > 0 {
		a := rest[0]
		rest = rest[1:]
		switch {
		case a == "--":
			args = append(args, rest...)
			rest = nil
		case len(a) > 1 && a[0] == '-':
			var err error
			if rest, err = setTrailingFlag(c, a, rest); err != nil {
				return nil, err
			}
		default:
			args = append(args, a)
		}
	}
	// A --format among them is checked now, before the command acts, as
	// one given before the arguments is.
	if _, err := outputFormat(c); err != nil {
		return nil, err
	}
	// A subcommand's HelpName starts with the program's name, a command's
	// does not: "batchq: queues create: ...; usage: batchq queues create NAME".
	cmd := strings.TrimPrefix(c.Command.HelpName, "batchq ")
	usage := strings.TrimSpace("batchq " + cmd + " " + c.Command.ArgsUsage)
	if len(args) < required {
		return nil, usagef("batchq: %s: missing %s; usage: %s", cmd, names[len(args)], usage)
	}
	if len(args) > len(names) {
		return nil, usagef("batchq: %s: unexpected argument %q; usage: %s", cmd, args[len(names)], usage)
	}
	return args, nil
}

// setTrailingFlag applies one flag given after the arguments and returns the
// arguments left.
func setTrailingFlag(c *cli.Context, arg string, rest []string) ([]string, error) {
	name, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	if name == "help" || name == "h" {
		cli.HelpPrinter(c.App.Writer, cli.CommandHelpTemplate, c.Command)
		return nil, errHelpShown
	}
	var flag cli.Flag
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			if n == name {
				flag = f
			}
		}
	}
	cmd := strings.TrimPrefix(c.Command.HelpName, "batchq ")
	if flag == nil {
		return nil, flagNotDefined(cmd, name)
	}
	if _, isBool := flag.(*cli.BoolFlag); isBool && !hasValue {
		value, hasValue = "true", true
	}
	if !hasValue {
		if len(rest) == 0 {
			return nil, flagNeedsValue(cmd, flag, name)
		}
		value, rest = rest[0], rest[1:]
	}
	if err := c.Set(flag.Names()[0], value); err != nil {
		return nil, flagValueError(flag, name, value, err.Error())
	}
	return rest, nil
}

// flagError says an error of the flag package, which urfave/cli returns as
// it is ("invalid value "1.5" for flag -cost: parse error"), in the words
// of setTrailingFlag, which reads the flags given after the arguments: the
// flag with its two dashes, the value, and what the flag takes. command is
// the command's path ("queues create", "" for batchq itself), flags its
// flags. Other errors are usage errors as they are.
func flagError(command string, flags []cli.Flag, err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return flagNotDefined(command, name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return flagNeedsValue(command, findFlag(flags, name), name)
	}
	if err, ok := envFlagError(flags, msg); ok {
		return err
	}
	for _, form := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, form)
		if !ok {
			continue
		}
		quoted, qerr := strconv.QuotedPrefix(rest)
		if qerr != nil {
			break
		}
		value, _ := strconv.Unquote(quoted)
		rest = strings.TrimPrefix(strings.TrimPrefix(rest[len(quoted):], " for flag -"), " for -")
		if name, reason, ok := strings.Cut(rest, ": "); ok {
			return flagValueError(findFlag(flags, name), name, value, reason)
		}
	}
	return usageError{msg: msg}
}

// findFlag returns the flag of flags named name, or nil.
func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// dashed is a flag's name as it is typed: --cost, and -h.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func commandPrefix(command string) string {
	if command == "" {
		return "batchq: "
	}
	return "batchq: " + command + ": "
}

func flagNotDefined(command, name string) error {
	return usagef("%sflag provided but not defined: %s", commandPrefix(command), dashed(name))
}

func flagNeedsValue(command string, f cli.Flag, name string) error {
	if takes := flagTakes(f); takes != "" {
		return usagef("%s%s needs a value: %s", commandPrefix(command), dashed(name), takes)
	}
	return usagef("%s%s needs a value", commandPrefix(command), dashed(name))
}

// flagTakes says what f's value is, or "" where its usage says it.
func flagTakes(f cli.Flag) string {
	switch f := unwrapFlag(f).(type) {
	case *cli.IntFlag, *cli.Int64Flag, int64NoDefault:
		return "a whole number"
	case *cli.UintFlag, *cli.Uint64Flag:
		return "a whole number, 0 or more"
	case *cli.Float64Flag:
		return "a decimal number"
	case *cli.DurationFlag:
		return "a duration like 90s, 5m or 2h"
	case *cli.BoolFlag:
		return "true or false"
	case *cli.GenericFlag:
		if _, ok := f.Value.(*durationValue); ok {
			return "a duration like 90m, 36h or 30d"
		}
	}
	return ""
}

// flagValueError says why value is not one f takes. reason is the flag
// package's: for the standard types only "parse error" or "value out of
// range", which flagTakes says better; a value of batchq's own says it.
func flagValueError(f cli.Flag, name, value, reason string) error {
	return usagef("batchq: %s %q: %s", dashed(name), value, valueRule(f, value, reason))
}

// valueRule words why value is no value of f, from the flag package's
// reason.
func valueRule(f cli.Flag, value, reason string) string {
	takes := flagTakes(f)
	_, generic := f.(*cli.GenericFlag)
	_, duration := f.(*cli.DurationFlag)
	switch {
	case takes == "" || generic:
	case reason == "value out of range":
		reason = "out of range for " + takes
	case duration && goDuration.MatchString(value):
		// A duration, too long for a time.Duration.
		reason = "out of range for a duration (at most 2562047h)"
	default:
		reason = "not " + takes
	}
	return reason
}

// envFlagError words the flag package's refusal of a flag's environment
// variable, `could not parse "x" as int value from environment variable
// "BATCHQ_CONCURRENCY" for flag concurrency: strconv.ParseInt: parsing "x":
// invalid syntax`, as the flag's own refusals are worded, naming the
// variable; ok is false for another error.
func envFlagError(flags []cli.Flag, msg string) (err error, ok bool) {
	rest, ok := strings.CutPrefix(msg, "could not parse ")
	if !ok {
		return nil, false
	}
	quoted, qerr := strconv.QuotedPrefix(rest)
	if qerr != nil {
		return nil, false
	}
	value, _ := strconv.Unquote(quoted)
	_, rest, ok = strings.Cut(rest[len(quoted):], " value from environment variable ")
	if !ok {
		return nil, false
	}
	quoted, qerr = strconv.QuotedPrefix(rest)
	if qerr != nil {
		return nil, false
	}
	env, _ := strconv.Unquote(quoted)
	name, cause, ok := strings.Cut(strings.TrimPrefix(rest[len(quoted):], " for flag "), ": ")
	if !ok {
		return nil, false
	}
	reason := "parse error"
	if strings.Contains(cause, "value out of range") {
		reason = "value out of range"
	}
	return usagef("batchq: %s %q (for %s): %s", env, value, dashed(name), valueRule(findFlag(flags, name), value, reason)), true
}

// fromEnvironment adds to a usage error of c's command about a flag (of the
// command, its parents or the app) whose value came from its environment
// variable rather than the command line, which variable set it: "batchq: --concurrency 0: must be in 1..10000 (set by
// BATCHQ_CONCURRENCY)". A value someone set in the environment and forgot
// is then found where it was set. The message keeps its own words, and the
// value as the command shows it (a URL without its credentials, say).
func fromEnvironment(c *cli.Context, err error) error {
	u, ok := err.(usageError)
	if !ok {
		return err
	}
	flags := slices.Clone(c.App.Flags)
	for _, l := range c.Lineage() {
		if l.Command != nil {
			flags = append(flags, l.Command.Flags...)
		}
	}
	env, ok := setByEnvironment(c, flagNamedIn(u.msg, flags))
	if !ok {
		return err
	}
	return usageError{msg: u.msg + " (set by " + env + ")"}
}

// setByEnvironment is the environment variable that gave f its value, if
// the command line did not.
func setByEnvironment(c *cli.Context, f cli.Flag) (string, bool) {
	if f == nil || givenOnCommandLine(c, f) {
		return "", false
	}
	return environmentVariable(f)
}

// givenOnCommandLine reports whether the command line gave f: among the
// command's arguments, or before the command for one of the app's flags
// (globalString).
func givenOnCommandLine(c *cli.Context, f cli.Flag) bool {
	if g, ok := f.(globalString); ok && *g.given {
		return true
	}
	return inArgs(givenArgs(c), f)
}

// globalString is a string flag of the app, given before the command, that
// knows whether the command line gave it. Those flags are not among the
// command's arguments (givenArgs), where inArgs finds the command's own, and
// urfave/cli's IsSet is true for a flag its environment variable set too.
type globalString struct {
	*cli.StringFlag
	given *bool
}

// globalStrings makes every string flag of the app's flags a globalString.
func globalStrings(flags []cli.Flag) {
	for i, f := range flags {
		if f, ok := f.(*cli.StringFlag); ok {
			flags[i] = globalString{StringFlag: f, given: new(bool)}
		}
	}
}

func (f globalString) wrapped() cli.Flag { return f.StringFlag }

// Apply applies the flag, its environment variable included, then puts a
// recorder in front of the value it registered under each of its names: the
// flag package sets that value only for what it reads on the command line.
func (f globalString) Apply(set *flag.FlagSet) error {
	if err := f.StringFlag.Apply(set); err != nil {
		return err
	}
	for _, name := range f.Names() {
		if fl := set.Lookup(name); fl != nil {
			fl.Value = givenValue{Value: fl.Value, given: f.given}
		}
	}
	return nil
}

// givenValue is a flag's value that records being set.
type givenValue struct {
	flag.Value
	given *bool
}

// Get is the value, for cli.Context.Value.
func (v givenValue) Get() any {
	if g, ok := v.Value.(flag.Getter); ok {
		return g.Get()
	}
	return v.Value.String()
}

func (v givenValue) Set(s string) error {
	*v.given = true
	return v.Value.Set(s)
}

// flagNamedIn is the first of flags that msg names as --name, or nil.
func flagNamedIn(msg string, flags []cli.Flag) cli.Flag {
	for i := 0; i+2 < len(msg); i++ {
		if msg[i:i+2] != "--" || (i > 0 && msg[i-1] != ' ') {
			continue
		}
		end := i + 2
		for end < len(msg) && (msg[end] == '-' || msg[end] >= 'a' && msg[end] <= 'z' || msg[end] >= '0' && msg[end] <= '9') {
			end++
		}
		if end < len(msg) && !strings.ContainsRune(" :\"", rune(msg[end])) {
			continue
		}
		if f := findFlag(flags, msg[i+2:end]); f != nil {
			return f
		}
	}
	return nil
}

// givenArgs is the command line after the app's own flags, which the
// app's context holds: the longest of c's lineage's.
func givenArgs(c *cli.Context) []string {
	var args []string
	for _, l := range c.Lineage() {
		if l.NArg() > len(args) {
			args = l.Args().Slice()
		}
	}
	return args
}

// inArgs reports whether args name f, in any of its names and spellings. A
// "--" ends nothing here: commands that read their own flags take flags
// after one too.
func inArgs(args []string, f cli.Flag) bool {
	for _, a := range args {
		for _, n := range f.Names() {
			for _, dash := range []string{"-", "--"} {
				if a == dash+n || strings.HasPrefix(a, dash+n+"=") {
					return true
				}
			}
		}
	}
	return false
}

// environmentVariable is the first of f's environment variables that is
// set: where urfave/cli took f's value from, when the command line did not
// give it.
func environmentVariable(f cli.Flag) (string, bool) {
	for _, e := range envVarsOf(f) {
		if _, set := os.LookupEnv(e); set {
			return e, true
		}
	}
	return "", false
}

// requireFlags fails with a usage error naming the first of flags that is
// not set, on the command line or in its environment variable. Flags are
// not marked Required: urfave/cli prints the command's whole help before
// its error then, and batchq's errors are one line.
func requireFlags(c *cli.Context, flags ...string) error {
	for _, f := range flags {
		if !c.IsSet(f) {
			cmd := c.Command.HelpName
			return usagef("batchq: %s: --%s is required (see %s --help)", strings.TrimPrefix(cmd, "batchq "), f, cmd)
		}
	}
	return nil
}

// int64NoDefault is an Int64Flag whose help shows no default: for a flag
// that must be given, whose zero urfave/cli would show as "(default: 0)".
type int64NoDefault struct{ *cli.Int64Flag }

func (f int64NoDefault) GetDefaultText() string { return "" }

// String is the flag's line in the help; the Int64Flag's own would call its
// own GetDefaultText.
func (f int64NoDefault) String() string { return cli.FlagStringer(f) }

// parseJobID reads a job id argument.
func parseJobID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usagef("batchq: job id %q: must be a positive integer", s)
	}
	return id, nil
}

// maxDurationDays bounds a duration given on the command line or in an
// enqueue file, in either form: 100 years, far past any deadline or window
// batchq keeps, and well inside a time.Duration.
const maxDurationDays = 100 * 365

// errNotDuration is parseDuration's error for text that is no duration.
var errNotDuration = errors.New("not a duration like 90m, 36h or 30d")

// goDuration matches Go's duration syntax, so that one time.ParseDuration
// refuses is known to be too large rather than mistyped.
var goDuration = regexp.MustCompile(`^[-+]?(([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// parseDuration reads a duration: Go syntax (90s, 36h) or whole days (30d),
// at most maxDurationDays either way. A negative one is returned for the
// caller to refuse with its own rule; one too negative to hold is refused
// here as negative, as every caller refuses negative durations.
func parseDuration(s string) (time.Duration, error) {
	tooLarge := func(negative bool) error {
		if negative {
			return errors.New("must not be negative")
		}
		return fmt.Errorf("must be at most %dd (%dh)", maxDurationDays, maxDurationDays*24)
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return 0, tooLarge(strings.HasPrefix(days, "-"))
		case err != nil:
			return 0, errNotDuration
		case n > maxDurationDays || n < -maxDurationDays:
			return 0, tooLarge(n < 0)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && goDuration.MatchString(s):
		return 0, tooLarge(strings.HasPrefix(s, "-"))
	case err != nil:
		return 0, errNotDuration
	case d > maxDurationDays*24*time.Hour || d < -maxDurationDays*24*time.Hour:
		return 0, tooLarge(d < 0)
	}
	return d, nil
}

// durationValue is the value of a duration flag that takes whole days too
// (7d), read with parseDuration as --older-than and --since are.
type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return time.Duration(*d).String() }

// daysFlag is a duration flag that takes whole days too; read it with
// daysDuration.
func daysFlag(name, usage, defaultText string) *cli.GenericFlag {
	return &cli.GenericFlag{Name: name, Usage: usage, Value: new(durationValue), DefaultText: defaultText}
}

// daysDuration returns the value of a daysFlag.
func daysDuration(c *cli.Context, name string) time.Duration {
	if v, ok := c.Generic(name).(*durationValue); ok {
		return time.Duration(*v)
	}
	return 0
}

// parseWhen reads a point in time for flag: an RFC 3339 time, or a duration
// before now (24h, 7d).
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		// Go's zero time is how package queue's filters say "none": passed
		// on, it would drop the filter, and a cancel would take every job.
		if t.IsZero() {
			return time.Time{}, usagef("batchq: --%s %q: must be after 0001-01-01T00:00:00Z, which stands for no time", flag, s)
		}
		return t, nil
	}
	d, err := parseDuration(s)
	switch {
	case errors.Is(err, errNotDuration):
		return time.Time{}, usagef("batchq: --%s %q: not an RFC 3339 time (2026-01-02T15:04:05Z) or a duration before now (24h, 7d)", flag, s)
	case err != nil:
		return time.Time{}, usagef("batchq: --%s %q: %v", flag, s, err)
	case d < 0:
		return time.Time{}, usagef("batchq: --%s %q: must not be negative", flag, s)
	}
	return now.Add(-d), nil
}

// settingUsage turns a setting error caused by the command line into a
// usage error that names the flag, or the argument for the name (what names
// what it names: "queue name", "tenant name").
func settingUsage(err error, what string) error {
	var se *queue.SettingError
	if !errors.As(err, &se) {
		return err
	}
	if se.Field == "name" {
		return usagef("batchq: %s: %s", what, se.Rule)
	}
	return usagef("batchq: --%s: %s", strings.ReplaceAll(se.Field, "_", "-"), se.Rule)
}

// payloadFlag reads --payload: JSON, in UTF-8. An empty one is refused,
// not taken for {} as the Go API takes a nil payload: on a command line it
// is more likely a variable that was not set than a wish for {}, which
// leaving the flag out gives.
func payloadFlag(c *cli.Context) (json.RawMessage, error) {
	p := c.String("payload")
	if strings.TrimSpace(p) == "" {
		return nil, usagef("batchq: --payload %q: empty, which is not JSON; leave --payload out for {}", p)
	}
	if !json.Valid([]byte(p)) {
		return nil, usagef("batchq: --payload %s: not valid JSON", clip([]byte(p)))
	}
	if !utf8.ValidString(p) {
		return nil, usagef("batchq: --payload: must be valid UTF-8")
	}
	return json.RawMessage(p), nil
}

// ttlRefusal names the TTL in the refusal of a deadline that j's TTL set,
// where j gave no deadline: the client turns a TTL into a deadline counted
// from now (or the run-at), and the database refuses that deadline when the
// TTL ran out before it stored the job. Any other err is returned as it is.
func ttlRefusal(err error, j queue.NewJob) error {
	var inv *queue.InvalidJobError
	if !errors.As(err, &inv) || inv.Field != "deadline" || j.TTL <= 0 || !j.Deadline.IsZero() {
		return err
	}
	rule := "the deadline it sets " + inv.Rule
	switch {
	case strings.HasPrefix(inv.Rule, "must be in the future"):
		rule = "too short: " + rule
	case strings.HasPrefix(inv.Rule, "must be before"):
		rule = "too long: " + rule
	}
	return &queue.InvalidJobError{Index: inv.Index, Field: "ttl", Rule: rule}
}

// jobUsage says a job the client refused as a usage error naming the flag
// of the field; nil for any other error.
func jobUsage(err error) error {
	var inv *queue.InvalidJobError
	if errors.As(err, &inv) {
		return usagef("batchq: --%s: %s", strings.ReplaceAll(inv.Field, "_", "-"), inv.Rule)
	}
	return nil
}
