package benchkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what one scenario measured. It marshals to JSON as is.
type Report struct {
	Scenario string `json:"scenario"`
	// Command is the command line that produced the report, without the
	// database URL; the caller sets it.
	Command string    `json:"command,omitempty"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"` // how long the whole scenario took
	Machine Machine   `json:"machine"`
	Reps    int       `json:"reps"`
	WarmUp  bool      `json:"warm_up"`
	Params  []Param   `json:"params"`
	Tables  []*Table  `json:"tables"`
	Bars    []Bar     `json:"bars"`
	Notes   []string  `json:"notes,omitempty"`
}

// Param is one setting of a scenario.
type Param struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// Table is rows of cells under named columns. Column names are snake_case
// (the JSON keys); the text header is their upper-case words. A cell is a
// string, an integer, a float64, a Labeled number or a Sample.
type Table struct {
	Name    string   `json:"name"`
	Title   string   `json:"title"`
	Columns []string `json:"columns"`
	Rows    [][]any  `json:"-"`
}

// NewTable returns an empty table.
func NewTable(name, title string, columns ...string) *Table {
	return &Table{Name: name, Title: title, Columns: columns}
}

// Add appends a row; it panics if the row does not have one cell per column.
func (t *Table) Add(cells ...any) {
	if len(cells) != len(t.Columns) {
		panic(fmt.Sprintf("benchkit: table %s: %d cells for %d columns", t.Name, len(cells), len(t.Columns)))
	}
	t.Rows = append(t.Rows, cells)
}

// MarshalJSON writes the rows as objects keyed by column, in column order.
func (t *Table) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	head, err := json.Marshal(struct {
		Name    string   `json:"name"`
		Title   string   `json:"title"`
		Columns []string `json:"columns"`
	}{t.Name, t.Title, t.Columns})
	if err != nil {
		return nil, err
	}
	b.Write(head[:len(head)-1])
	b.WriteString(`,"rows":[`)
	for i, r := range t.Rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('{')
		for j, c := range r {
			if j > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(t.Columns[j])
			v, err := json.Marshal(c)
			if err != nil {
				return nil, fmt.Errorf("benchkit: table %s, column %s: %w", t.Name, t.Columns[j], err)
			}
			b.Write(k)
			b.WriteByte(':')
			b.Write(v)
		}
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

// Bar is one of the bars, measured as a ratio in one run. A bar
// that could not be measured (nothing to compare, such as no window with
// every tenant backlogged) has a NaN Value and is neither met nor missed:
// Met is false, and JSON shows its value and met as null.
type Bar struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Target float64 `json:"target"`
	// AtMost is true when Target is an upper bound, false for a lower one.
	AtMost bool   `json:"at_most"`
	Met    bool   `json:"met"`
	Detail string `json:"detail"` // what the ratio was computed from
}

func newBar(name string, value, target float64, atMost bool, detail string) Bar {
	if math.IsNaN(value) || math.IsInf(value, 0) {
		return Bar{Name: name, Value: math.NaN(), Target: target, AtMost: atMost, Detail: detail}
	}
	met := value >= target
	if atMost {
		met = value <= target
	}
	return Bar{Name: name, Value: round(value, 4), Target: target, AtMost: atMost, Met: met, Detail: detail}
}

// Measured reports whether the bar has a value to hold against its target.
func (b Bar) Measured() bool { return !math.IsNaN(b.Value) }

// MarshalJSON writes a bar that was not measured with null for its value
// and its verdict: 0 and false would read as a measurement that missed.
func (b Bar) MarshalJSON() ([]byte, error) {
	var value *float64
	var met *bool
	if b.Measured() {
		value, met = &b.Value, &b.Met
	}
	return json.Marshal(struct {
		Name   string   `json:"name"`
		Value  *float64 `json:"value"`
		Target float64  `json:"target"`
		AtMost bool     `json:"at_most"`
		Met    *bool    `json:"met"`
		Detail string   `json:"detail"`
	}{b.Name, value, b.Target, b.AtMost, met, b.Detail})
}

// Labeled is a number that the text table shows as Label: JSON gets the
// number alone, so a column keeps one type whatever its text says.
type Labeled struct {
	Value float64
	Label string
}

// MarshalJSON writes the number.
func (l Labeled) MarshalJSON() ([]byte, error) { return json.Marshal(l.Value) }

// Sample is a measurement repeated Reps times. It marshals as its median,
// minimum, maximum, spread and values.
type Sample struct {
	Values []float64
	// Prec is the number of decimals the text table shows; -1 picks by
	// magnitude.
	Prec int
}

// NewSample returns a sample shown with prec decimals (-1: by magnitude).
// NaN values (nothing measured) are left out.
func NewSample(prec int, values ...float64) Sample {
	s := Sample{Prec: prec}
	for _, v := range values {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			s.Values = append(s.Values, v)
		}
	}
	return s
}

// Median is the middle value (the mean of the two middle ones for an even
// count); NaN for no values.
func (s Sample) Median() float64 { return median(s.Values) }

// Spread is the largest deviation of a value from the median, as a fraction
// of the median.
func (s Sample) Spread() float64 {
	m := s.Median()
	if len(s.Values) == 0 || m == 0 {
		return 0
	}
	d := 0.0
	for _, v := range s.Values {
		d = max(d, math.Abs(v-m))
	}
	return d / math.Abs(m)
}

// MarshalJSON writes the sample's summary and values; a sample with no
// values (nothing measured) has null for its summary.
func (s Sample) MarshalJSON() ([]byte, error) {
	vals := make([]float64, len(s.Values))
	for i, v := range s.Values {
		vals[i] = round(v, 6)
	}
	lo, hi, spread := math.NaN(), math.NaN(), math.NaN()
	if len(vals) > 0 {
		lo, hi, spread = slices.Min(vals), slices.Max(vals), round(s.Spread(), 4)
	}
	return json.Marshal(struct {
		Median *float64  `json:"median"`
		Min    *float64  `json:"min"`
		Max    *float64  `json:"max"`
		Spread *float64  `json:"spread"`
		Values []float64 `json:"values"`
	}{jsonNum(round(s.Median(), 6)), jsonNum(lo), jsonNum(hi), jsonNum(spread), vals})
}

// jsonNum is v for JSON: nil (null) when it is NaN, nothing measured.
func jsonNum(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func round(v float64, digits int) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// median returns the median of vs without changing it; NaN for none.
func median(vs []float64) float64 {
	return quantile(vs, 0.5)
}

// quantile returns the q-quantile of vs by linear interpolation between the
// closest ranks; NaN for none.
func quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// WriteText prints the report for people: the machine, the parameters, each
// table and the bars.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "batchq bench %s, %s, %.0fs\n", r.Scenario, r.Started.UTC().Format("2006-01-02 15:04Z"), r.Seconds)
	if r.Command != "" {
		fmt.Fprintf(&b, "command:  %s\n", r.Command)
	}
	fmt.Fprintf(&b, "machine:  %s\n", r.Machine.Summary())
	fmt.Fprintf(&b, "postgres: %s\n", r.Machine.PostgresSummary())
	var ps []string
	for _, p := range r.Params {
		ps = append(ps, fmt.Sprintf("%s=%v", p.Name, p.Value))
	}
	fmt.Fprintf(&b, "params:   %s\n", strings.Join(ps, " "))
	warm := ", no warm-up"
	if r.WarmUp {
		warm = " after a warm-up"
	}
	fmt.Fprintf(&b, "runs:     %d repetitions%s; a cell is the median, ± the largest deviation of a repetition from it\n", r.Reps, warm)
	for _, t := range r.Tables {
		fmt.Fprintf(&b, "\n%s\n", t.Title)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		head := make([]string, len(t.Columns))
		for i, c := range t.Columns {
			head[i] = strings.ToUpper(strings.ReplaceAll(c, "_", " "))
		}
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		for _, row := range t.Rows {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = textCell(c)
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Bars) > 0 {
		fmt.Fprintf(&b, "\nbars (measured in this run)\n")
		for _, bar := range r.Bars {
			verdict, value, op := "MISSED", fmtFloat(bar.Value, 3), "≥"
			switch {
			case !bar.Measured():
				verdict, value = "-", "not measured"
			case bar.Met:
				verdict = "met"
			}
			if bar.AtMost {
				op = "≤"
			}
			fmt.Fprintf(&b, "  %-6s %s: %s (bar %s %s); %s\n", verdict, bar.Name, value, op, fmtFloat(bar.Target, 2), bar.Detail)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nnote: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func textCell(c any) string {
	switch v := c.(type) {
	case nil:
		return "-"
	case string:
		return v
	case int:
		return group(strconv.Itoa(v))
	case int64:
		return group(strconv.FormatInt(v, 10))
	case float64:
		return fmtFloat(v, -1)
	case Labeled:
		return v.Label
	case Sample:
		if len(v.Values) == 0 {
			return "-"
		}
		s := fmtFloat(v.Median(), v.Prec)
		if len(v.Values) > 1 {
			s += fmt.Sprintf(" ±%.0f%%", 100*v.Spread())
		}
		return s
	}
	return fmt.Sprint(c)
}

// fmtFloat formats v with prec decimals, or by magnitude when prec < 0,
// grouping thousands.
func fmtFloat(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	if prec < 0 {
		switch a := math.Abs(v); {
		case a >= 100:
			prec = 0
		case a >= 10:
			prec = 1
		case a >= 1 || a == 0:
			prec = 2
		default:
			prec = 3
		}
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	if frac != "" {
		return group(intPart) + "." + frac
	}
	return group(intPart)
}

// group puts thousands separators into a decimal integer.
func group(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
