package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/batchq/batchq/queue"
)

// A job line is one JSON object per line of an enqueue file:
//
//	{"queue":"imports","tenant":"acme","kind":"summarize","cost":1200,
//	 "ttl":"2h","max_attempts":3,"payload":{"doc":42},"unique_key":"doc-42"}
//
// queue, tenant and cost are required; deadline (RFC 3339) or
// ttl (a Go duration, or whole days like "7d") gives the deadline, one or neither; run_at (RFC
// 3339) or delay (a duration, as ttl) the earliest the job may run; the rest are
// optional. A null value is the same as leaving the field out, except a
// payload's: JSON null is a payload, stored as null, as batchq.enqueue_jobs
// and --payload null store it. An empty kind or unique_key is refused, as
// the flags refuse it, not taken for the default. Field names
// are exact and each may appear once; anything else is an error that names
// the field.

// jobLineFields are the fields a job line may have.
var jobLineFields = map[string]bool{
	"queue": true, "tenant": true, "kind": true, "cost": true, "deadline": true, "ttl": true,
	"max_attempts": true, "payload": true, "unique_key": true, "run_at": true, "delay": true,
}

// jsonNumber is the JSON number syntax: sign, whole part, fraction,
// exponent.
var jsonNumber = regexp.MustCompile(`^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$`)

// parseJobLine reads one job line. Errors start with the field they are
// about. It checks syntax, types and that the required fields are there;
// the queue client checks the values (costs in range, a deadline in the
// future, ...) before writing anything.
func parseJobLine(line []byte) (queue.NewJob, error) {
	fields, err := jobLineObject(line)
	if err != nil {
		return queue.NewJob{}, err
	}
	var j queue.NewJob
	for _, f := range []struct {
		name string
		dst  *string
		// instead, for a field the queue would take "" for its default: an
		// empty one is refused, as --kind '' and --unique-key '' are, since
		// it is more likely an empty column than a choice. The queue
		// refuses an empty queue and tenant itself.
		instead string
	}{
		{"queue", &j.Queue, ""}, {"tenant", &j.Tenant, ""}, {"kind", &j.Kind, `leave it out, or null, for "default"`},
		{"unique_key", &j.UniqueKey, "leave it out, or null, for none"},
	} {
		if raw, ok := fields[f.name]; ok {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return queue.NewJob{}, fmt.Errorf("%s: must be a string (got %s)", f.name, clip(raw))
			}
			// Decoded, it would be stored with U+FFFD in its place.
			if queue.HasUnpairedSurrogate(raw) {
				return queue.NewJob{}, fmt.Errorf(`%s: must not contain an unpaired UTF-16 surrogate escape such as \ud800 (got %s)`, f.name, clip(raw))
			}
			if *f.dst == "" && f.instead != "" {
				return queue.NewJob{}, fmt.Errorf("%s: must not be empty (%s)", f.name, f.instead)
			}
		}
	}
	if raw, ok := fields["cost"]; ok {
		if j.Cost, err = jsonInt(raw, 64); err != nil {
			return queue.NewJob{}, fmt.Errorf("cost: %w", err)
		}
	}
	if raw, ok := fields["max_attempts"]; ok {
		n, err := jsonInt(raw, 32)
		if err != nil {
			return queue.NewJob{}, fmt.Errorf("max_attempts: %w", err)
		}
		j.MaxAttempts = int(n)
	}
	if raw, ok := fields["deadline"]; ok {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return queue.NewJob{}, fmt.Errorf("deadline: must be an RFC 3339 time in a string (got %s)", clip(raw))
		}
		if j.Deadline, err = time.Parse(time.RFC3339, s); err != nil {
			return queue.NewJob{}, fmt.Errorf("deadline: %q is not an RFC 3339 time like 2026-01-02T15:04:05Z", s)
		}
	}
	if raw, ok := fields["ttl"]; ok {
		if _, both := fields["deadline"]; both {
			return queue.NewJob{}, errors.New("deadline: give a deadline or a ttl, not both")
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return queue.NewJob{}, fmt.Errorf("ttl: must be a duration in a string, like \"90m\" (got %s)", clip(raw))
		}
		// As the command line's durations: Go's, or whole days.
		if j.TTL, err = parseDuration(s); err != nil {
			return queue.NewJob{}, durationFieldError("ttl", s, err)
		}
		if j.TTL <= 0 {
			return queue.NewJob{}, fmt.Errorf("ttl: must be > 0 (got %s)", s)
		}
	}
	if raw, ok := fields["run_at"]; ok {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return queue.NewJob{}, fmt.Errorf("run_at: must be an RFC 3339 time in a string (got %s)", clip(raw))
		}
		if j.RunAt, err = time.Parse(time.RFC3339, s); err != nil {
			return queue.NewJob{}, fmt.Errorf("run_at: %q is not an RFC 3339 time like 2026-01-02T15:04:05Z", s)
		}
	}
	if raw, ok := fields["delay"]; ok {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return queue.NewJob{}, fmt.Errorf("delay: must be a duration in a string, like \"90m\" (got %s)", clip(raw))
		}
		if j.Delay, err = parseDuration(s); err != nil {
			return queue.NewJob{}, durationFieldError("delay", s, err)
		}
		if j.Delay < 0 {
			return queue.NewJob{}, fmt.Errorf("delay: must be >= 0 (got %s)", s)
		}
		// A delay of 0 is no delay, beside a run_at too, as for
		// --delay 0s and SQL's delay => '0'.
		// A run_at of Go's zero time is none.
		if _, both := fields["run_at"]; both && j.Delay > 0 && !j.RunAt.IsZero() {
			return queue.NewJob{}, errors.New("run_at: give a run_at or a delay, not both")
		}
	}
	if raw, ok := fields["payload"]; ok {
		j.Payload = raw
	}
	// Absent is not zero: the queue would say a missing cost "must be in
	// 1..", of 0, which the line never said.
	for _, name := range []string{"queue", "tenant", "cost"} {
		if _, ok := fields[name]; !ok {
			return queue.NewJob{}, fmt.Errorf("%s: required (every line has queue, tenant and cost)", name)
		}
	}
	return j, nil
}

// jobLineObject splits a line into its fields, rejecting what is not one
// JSON object, unknown and repeated fields. Null fields are left out, but
// for the payload.
func jobLineObject(line []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON: %v", jsonErr(err))
	}
	if tok != json.Delim('{') {
		return nil, errors.New("must be a JSON object, {\"queue\": ..., \"tenant\": ..., \"cost\": ...}")
	}
	fields := map[string]json.RawMessage{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON: %v", jsonErr(err))
		}
		name, _ := tok.(string)
		if !jobLineFields[name] {
			return nil, fmt.Errorf("unknown field %q (fields: queue, tenant, kind, cost, deadline, ttl, run_at, delay, max_attempts, payload, unique_key)", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%s: given twice", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%s: not JSON: %v", name, jsonErr(err))
		}
		// encoding/json would turn invalid bytes into U+FFFD and store
		// something the file never said.
		if !utf8.Valid(raw) {
			return nil, fmt.Errorf("%s: must be valid UTF-8", name)
		}
		if !bytes.Equal(raw, []byte("null")) || name == "payload" {
			fields[name] = raw
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not JSON: %v", jsonErr(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return fields, nil
}

// jsonInt reads a JSON number whose value is a whole number that fits in
// bits: 12, and also 12.0 and 1.2e1, as JSON has one kind of number and
// batchq.enqueue_jobs, reading them as jsonb, takes them all.
func jsonInt(raw json.RawMessage, bits int) (int64, error) {
	m := jsonNumber.FindStringSubmatch(string(raw))
	if m == nil {
		return 0, fmt.Errorf("must be an integer (got %s)", clip(raw))
	}
	whole, ok := wholeDigits(m[2], m[3], m[4])
	if !ok {
		return 0, fmt.Errorf("must be an integer (got %s)", clip(raw))
	}
	n, err := strconv.ParseInt(m[1]+whole, 10, bits)
	if err != nil {
		return 0, fmt.Errorf("%s is out of range for a %d-bit integer", clip(raw), bits)
	}
	return n, nil
}

// wholeDigits writes the number intPart.frac × 10^exp in decimal digits when
// it is a whole number, without building a number of the exponent's size:
// one too long for any integer comes back as twenty nines, out of range.
func wholeDigits(intPart, frac, exp string) (string, bool) {
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return "0", true
	}
	shift := -len(frac) // the power of ten digits is multiplied by
	if exp != "" {
		e, err := strconv.Atoi(exp)
		if err != nil || e > 1e7 || e < -1e7 { // a line holds fewer digits than that
			if strings.HasPrefix(exp, "-") {
				return "", false
			}
			return strings.Repeat("9", 20), true
		}
		shift += e
	}
	trimmed := strings.TrimRight(digits, "0")
	shift += len(digits) - len(trimmed)
	if shift < 0 {
		return "", false
	}
	if len(trimmed)+shift > 20 {
		return strings.Repeat("9", 20), true
	}
	return trimmed + strings.Repeat("0", shift), true
}

func jsonErr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("unexpected end of line")
	}
	return err
}

// clip keeps an echoed value short enough for a one-line error.
func clip(raw []byte) string {
	const max = 40
	s := strings.ToValidUTF8(string(raw), "\uFFFD")
	if utf8.RuneCountInString(s) <= max {
		return s
	}
	return string([]rune(s)[:max]) + "..."
}

// durationFieldError says why s, the value of a line's field, is not a
// duration it takes.
func durationFieldError(field, s string, err error) error {
	if errors.Is(err, errNotDuration) {
		return fmt.Errorf("%s: %q is not a duration like 90s, 2h or 7d", field, s)
	}
	return fmt.Errorf("%s: %q: %v", field, s, err)
}
