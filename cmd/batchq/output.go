package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/urfave/cli/v2"
)

// Commands whose output is data print it as --format says: an aligned table
// for people, or JSON or CSV for programs. The same columns in each; in JSON
// and CSV times are RFC 3339 in UTC and durations are seconds, rounded to the
// millisecond (2.788, never 2.7878249999999998).

const (
	formatTable = "table"
	formatJSON  = "json"
	formatCSV   = "csv"
)

const formatUsage = "output format: table, json or csv; in json and csv, times are RFC 3339 in UTC " +
	"and durations are seconds with at most 3 decimals (2.788)"

// globalFormatFlag is the app's --format, given before the command.
func globalFormatFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "format",
		Usage:   formatUsage,
		EnvVars: []string{"BATCHQ_FORMAT"},
		Value:   formatTable,
	}
}

// commandFormatFlag lets --format follow the command too, which urfave/cli
// v2 does not allow for the app's own flags.
func commandFormatFlag() cli.Flag {
	return &cli.StringFlag{Name: "format", Usage: formatUsage + " (default: the global --format)"}
}

// outputFormat returns the format the nearest command that set --format
// asked for, or a usage error naming a bad one.
func outputFormat(c *cli.Context) (string, error) {
	f := formatTable
	for _, ctx := range c.Lineage() {
		if v := ctx.String("format"); v != "" {
			f = v
			break
		}
	}
	switch f {
	case formatTable, formatJSON, formatCSV:
		return f, nil
	}
	return "", usagef("batchq: --format %q: must be table, json or csv", f)
}

// dataset is rows of cells under named columns. Names are snake_case: JSON
// keys and the CSV header; the table header is their upper-case words.
// Cells are strings, integers, floats, bools, times, durations, raw JSON or
// pointers to them; a nil pointer is no value.
type dataset struct {
	cols []string
	rows [][]any
}

func newDataset(cols ...string) *dataset { return &dataset{cols: cols} }

// with adds a column holding value in every row.
func (d *dataset) with(col string, value any) *dataset {
	d.cols = append(d.cols, col)
	for i := range d.rows {
		d.rows[i] = append(d.rows[i], value)
	}
	return d
}

func (d *dataset) add(cells ...any) {
	if len(cells) != len(d.cols) {
		panic(fmt.Sprintf("dataset: %d cells for %d columns", len(cells), len(d.cols)))
	}
	d.rows = append(d.rows, cells)
}

// writeList prints every row of d.
func writeList(c *cli.Context, d *dataset) error {
	f, err := outputFormat(c)
	if err != nil {
		return err
	}
	w := c.App.Writer
	switch f {
	case formatJSON:
		objs := make([]jsonObject, len(d.rows))
		for i, r := range d.rows {
			objs[i] = jsonObject{d.cols, r}
		}
		return encodeJSONData(w, objs)
	case formatCSV:
		return encodeCSVData(w, d)
	}
	header := make([]string, len(d.cols))
	for i, name := range d.cols {
		header[i] = strings.ToUpper(strings.ReplaceAll(name, "_", " "))
	}
	t := newTable(w, header...)
	for _, r := range d.rows {
		cells := make([]string, len(r))
		for i, v := range r {
			cells[i] = tableCell(v)
		}
		t.row(cells...)
	}
	return t.flush()
}

// writeRecord prints a dataset of one row: as a two-column FIELD VALUE table,
// a JSON object or CSV.
func writeRecord(c *cli.Context, d *dataset) error {
	f, err := outputFormat(c)
	if err != nil {
		return err
	}
	if len(d.rows) != 1 {
		panic("writeRecord: not one row")
	}
	switch f {
	case formatJSON:
		return encodeJSONData(c.App.Writer, jsonObject{d.cols, d.rows[0]})
	case formatCSV:
		return encodeCSVData(c.App.Writer, d)
	}
	t := newTable(c.App.Writer, "FIELD", "VALUE")
	for i, name := range d.cols {
		t.row(name, tableCell(d.rows[0][i]))
	}
	return t.flush()
}

// counted is n and the noun for it: "1 job", "2 jobs".
func counted[N int | int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// writeResult reports what a command did: a sentence for people, or the
// dataset of one row as JSON or CSV. The sentence is written as oneLine
// writes a table cell: the names in it (a tenant's, a kind's) show what they
// hold and cannot reorder the words around them.
func writeResult(c *cli.Context, sentence string, d *dataset) error {
	f, err := outputFormat(c)
	if err != nil {
		return err
	}
	if f == formatTable {
		_, err := fmt.Fprintln(c.App.Writer, oneLine(sentence))
		return err
	}
	return writeRecord(c, d)
}

// jsonObject marshals one row with its keys in column order.
type jsonObject struct {
	cols []string
	row  []any
}

func (o jsonObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, name := range o.cols {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(name)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(jsonValue(o.row[i]))
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", name, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func encodeJSONData(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("batchq: json output: %w", err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

func encodeCSVData(w io.Writer, d *dataset) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(d.cols); err != nil {
		return err
	}
	for _, r := range d.rows {
		rec := make([]string, len(r))
		for i, v := range r {
			rec[i] = csvCell(v)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// cellValue returns what a pointer cell points to, or nil for a nil pointer
// or empty JSON.
func cellValue(v any) any {
	switch p := v.(type) {
	case *string:
		if p != nil {
			return *p
		}
	case *int64:
		if p != nil {
			return *p
		}
	case *int:
		if p != nil {
			return *p
		}
	case *float64:
		if p != nil {
			return *p
		}
	case *time.Time:
		if p != nil {
			return *p
		}
	case *time.Duration:
		if p != nil {
			return *p
		}
	case json.RawMessage:
		if len(p) > 0 {
			return p
		}
	default:
		return v
	}
	return nil
}

func jsonValue(v any) any {
	switch x := cellValue(v).(type) {
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case time.Duration:
		return json.Number(seconds(x))
	case string:
		if x == "" {
			return nil
		}
		return x
	default:
		return x
	}
}

func csvCell(v any) string {
	switch x := cellValue(v).(type) {
	case nil:
		return ""
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case time.Duration:
		return seconds(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	default:
		return plainCell(x)
	}
}

// seconds writes d for JSON and CSV: seconds, rounded to the millisecond,
// without trailing zeros (2.788, 90, 0.001). d.Seconds() would print the
// float nearest to the nanoseconds, like 2.7878249999999998.
func seconds(d time.Duration) string {
	ms := d.Round(time.Millisecond).Milliseconds()
	// The float nearest ms/1000 prints as that decimal, exactly.
	return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64)
}

func tableCell(v any) string {
	switch x := cellValue(v).(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return oneLine(x)
	case time.Time:
		return x.UTC().Format("2006-01-02 15:04:05Z")
	case time.Duration:
		return shortDuration(x)
	case float64:
		s := strconv.FormatFloat(x, 'f', 3, 64)
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		if s == "0" && x != 0 {
			// Too small for three decimals (a weight of 0.0004, say), and
			// not zero.
			s = strconv.FormatFloat(x, 'g', 3, 64)
		}
		return s
	default:
		return oneLine(plainCell(x))
	}
}

// oneLine keeps a table cell on its row and in its column, a sentence or an
// error on its line, and the terminal as it was: line breaks and tabs (in a
// provider's error body, say) are written as \n and \t, other control
// characters (escape sequences, form feeds, the C1 controls U+0080-U+009F)
// and bytes that are not UTF-8 as \xNN or \u00NN, and the line and
// paragraph separators (U+2028, U+2029: line breaks to a terminal and to
// JavaScript) and the bidirectional controls (U+202E and its kin) as
// \uNNNN: a name that holds one would
// otherwise show its row, or the words after it, in another order than the
// one it holds. Every table cell, result sentence and error goes through it
// (tableCell, writeResult, exitCode).
func oneLine(s string) string {
	clean := true
	for _, r := range s {
		if isControl(r) || r == utf8.RuneError || isSeparator(r) || unicode.Is(unicode.Bidi_Control, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\r' && strings.HasPrefix(s[i+1:], "\n"):
			b.WriteString(`\n`)
			size = 2
		case r == '\n' || r == '\r':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError && size == 1, r < 0x80 && isControl(r):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isControl(r), isSeparator(r), unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isControl reports the C0 and C1 control characters and DEL.
func isControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r <= 0x9f) }

// isSeparator reports U+2028 LINE SEPARATOR and U+2029 PARAGRAPH SEPARATOR.
func isSeparator(r rune) bool { return r == '\u2028' || r == '\u2029' }

func plainCell(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.RawMessage:
		var b bytes.Buffer
		if json.Compact(&b, x) != nil {
			return string(x)
		}
		return b.String()
	default:
		return fmt.Sprint(x)
	}
}

// shortDuration prints d to the millisecond below a minute and to the second
// above, as people read waits.
func shortDuration(d time.Duration) string {
	if d >= time.Minute || d <= -time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}
