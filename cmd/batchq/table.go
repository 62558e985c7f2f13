package main

import (
	"io"
	"strings"

	"github.com/mattn/go-runewidth"
)

// table writes aligned columns for humans. Columns are padded by the width a
// terminal gives each cell, not by its count of characters: a wide character
// (東) takes two columns, a combining accent none. Cells hold no control
// characters or bidirectional controls (tableCell escapes them).
type table struct {
	w    io.Writer
	rows [][]string
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w}
	t.row(header...)
	return t
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

// flush writes the rows, each cell but a row's last padded to its column's
// width and two spaces.
func (t *table) flush() error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], runewidth.StringWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-runewidth.StringWidth(c)+2))
			}
		}
		b.WriteByte('\n')
	}
	t.rows = nil
	_, err := io.WriteString(t.w, b.String())
	return err
}
