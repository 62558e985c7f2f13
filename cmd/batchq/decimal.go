package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	dec "github.com/batchq/batchq/internal/decimal"
)

// Number flags read their values in base 10. Left to itself the flag
// package reads them as Go literals: --max-per-tenant 010 was 8, --cost 0x10
// was 16, migrate down --to 010 reverted to version 8, and --weight 0x1p1
// was 2 (1_0 was 10). A job id on the command line was already decimal.

// decimal makes every number flag of flags decimal, on the command line and
// in its environment variable. (int64NoDefault is decimal itself.)
func decimal(flags []cli.Flag) {
	for i, f := range flags {
		switch f := f.(type) {
		case *cli.IntFlag:
			flags[i] = decimalInt{f}
		case *cli.Int64Flag:
			flags[i] = decimalInt64{f}
		case *cli.UintFlag:
			flags[i] = decimalUint{f}
		case *cli.Uint64Flag:
			flags[i] = decimalUint64{f}
		case *cli.Float64Flag:
			flags[i] = decimalFloat64{f}
		}
	}
}

type decimalInt struct{ *cli.IntFlag }
type decimalInt64 struct{ *cli.Int64Flag }
type decimalUint struct{ *cli.UintFlag }
type decimalUint64 struct{ *cli.Uint64Flag }
type decimalFloat64 struct{ *cli.Float64Flag }

// Each reads its environment variable in base 10 (Base), its command line
// through decimalValue.
func (f decimalInt) Apply(set *flag.FlagSet) error {
	f.Base = 10
	return applyDecimal(f.IntFlag, set, false)
}

func (f decimalInt64) Apply(set *flag.FlagSet) error {
	f.Base = 10
	return applyDecimal(f.Int64Flag, set, false)
}

func (f decimalUint) Apply(set *flag.FlagSet) error {
	f.Base = 10
	return applyDecimal(f.UintFlag, set, true)
}

func (f decimalUint64) Apply(set *flag.FlagSet) error {
	f.Base = 10
	return applyDecimal(f.Uint64Flag, set, true)
}

// Apply refuses an environment variable that holds no decimal number, in the
// words the flag package refuses one it cannot read at all, which
// envFlagError turns into batchq's; the flag package reads the rest.
func (f decimalFloat64) Apply(set *flag.FlagSet) error {
	for _, env := range f.EnvVars {
		env = strings.TrimSpace(env)
		if val, ok := os.LookupEnv(env); ok {
			if _, ok := dec.ParseFloat(val); !ok && val != "" {
				return fmt.Errorf("could not parse %q as float64 value from environment variable %q for flag %s: %s",
					val, env, f.Name, floatReason(val))
			}
			break
		}
	}
	return applyNumber(f.Float64Flag, set, func(s string) (string, error) {
		n, ok := dec.ParseFloat(s)
		if !ok {
			return "", errors.New(floatReason(s))
		}
		return strconv.FormatFloat(n, 'g', -1, 64), nil
	})
}

// floatReason is the flag package's reason for a value that is not a
// decimal number a float64 holds: out of range for one too large or too
// small, else a parse error.
func floatReason(s string) string {
	if _, err := dec.Parse(s); errors.Is(err, dec.ErrRange) {
		return errFlagRange.Error()
	}
	return errFlagParse.Error()
}

func (f int64NoDefault) Apply(set *flag.FlagSet) error {
	f.Base = 10
	return applyDecimal(f.Int64Flag, set, false)
}

func (f decimalInt) wrapped() cli.Flag     { return f.IntFlag }
func (f decimalInt64) wrapped() cli.Flag   { return f.Int64Flag }
func (f decimalUint) wrapped() cli.Flag    { return f.UintFlag }
func (f decimalUint64) wrapped() cli.Flag  { return f.Uint64Flag }
func (f decimalFloat64) wrapped() cli.Flag { return f.Float64Flag }

// unwrapFlag is the urfave/cli flag f wraps, or f.
func unwrapFlag(f cli.Flag) cli.Flag {
	if w, ok := f.(interface{ wrapped() cli.Flag }); ok {
		return w.wrapped()
	}
	return f
}

// applyDecimal applies f to set, then puts a decimal reader in front of the
// value it registered under each of its names.
func applyDecimal(f cli.Flag, set *flag.FlagSet, unsigned bool) error {
	return applyNumber(f, set, func(s string) (string, error) { return wholeNumber(s, unsigned) })
}

// applyNumber applies f to set, then puts read in front of the value it
// registered under each of its names: read returns the canonical form of a
// value it takes, for the flag package's value to set.
func applyNumber(f cli.Flag, set *flag.FlagSet, read func(string) (string, error)) error {
	if err := f.Apply(set); err != nil {
		return err
	}
	for _, name := range f.Names() {
		if fl := set.Lookup(name); fl != nil {
			fl.Value = decimalValue{Value: fl.Value, read: read}
		}
	}
	return nil
}

// decimalValue reads a number in base 10 and hands the flag package's value
// its canonical form. Its errors are the flag package's own words, which
// flagError turns into batchq's.
type decimalValue struct {
	flag.Value
	read func(string) (string, error)
}

var (
	errFlagParse = errors.New("parse error")
	errFlagRange = errors.New("value out of range")
)

// Get is the value read, for cli.Context.Value.
func (v decimalValue) Get() any {
	if g, ok := v.Value.(flag.Getter); ok {
		return g.Get()
	}
	return v.Value.String()
}

func (v decimalValue) Set(s string) error {
	canonical, err := v.read(s)
	if err != nil {
		return err
	}
	return v.Value.Set(canonical)
}

// wholeNumber reads a whole number in base 10, 0 or more when unsigned.
func wholeNumber(s string, unsigned bool) (string, error) {
	var canonical string
	var err error
	if unsigned {
		var n uint64
		n, err = strconv.ParseUint(s, 10, 64)
		canonical = strconv.FormatUint(n, 10)
	} else {
		var n int64
		n, err = strconv.ParseInt(s, 10, 64)
		canonical = strconv.FormatInt(n, 10)
	}
	if errors.Is(err, strconv.ErrRange) {
		return "", errFlagRange
	}
	if err != nil {
		return "", errFlagParse
	}
	return canonical, nil
}
