package functions_test

import (
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/db/functions"
)

// On a cluster that distributes these tables by queue (docs/design/scale-out.md),
// a statement reaches one queue's rows only when every reference to one of
// them names the queue. This test keeps the hot path that way.
var queueTables = []string{"jobs", "tenant_ring", "ledger_adjustments", "outcomes", "queue_cursors", "ring_commit_checks"}

// hotPath lists the functions that work within one queue, each with the
// expressions that hold that queue in its body. cancel is not among them:
// it looks a job's queue up by the job's id, across queues.
var hotPath = []struct {
	name  string
	queue []string
}{
	{"claim", []string{"p_queue"}},
	{"complete", []string{"p_queue"}},
	{"fail", []string{"p_queue"}},
	{"release", []string{"p_queue"}},
	{"heartbeat", []string{"p_queue"}},
	{"finish_jobs", []string{"p_queue"}},
	{"rescue", []string{"p_queue"}},
	{"expire", []string{"p_queue"}},
	{"requeue", []string{"p_queue"}},
	{"apply_adjustments", []string{"p_queue"}},
	{"fold_pending", []string{"p_queue"}},
	{"fold_adjustments", []string{"p_queue"}},
	{"rekey", []string{"p_queue"}},
	{"ring_join", []string{"p_queue"}},
	{"ring_check_at_commit", []string{"NEW.queue"}},
	{"insert_jobs", []string{"p_queue"}},
	{"enqueue", []string{"p_queue"}},
	{"enqueue_job", []string{"queue"}},
	{"enqueue_jobs", []string{"queue"}},
}

// Functions that read, update and delete no queue table themselves: they
// check their arguments, call finish_jobs, insert_jobs or fold_pending, and
// insert.
var callsOnly = map[string]bool{"complete": true, "enqueue": true, "enqueue_job": true, "enqueue_jobs": true,
	"apply_adjustments": true}

// Every statement of a hot-path function that reads, updates or deletes
// rows of a table distributed by queue says which queue.
func TestHotPathStatementsStayInOneQueue(t *testing.T) {
	t.Parallel()
	bodies := functionBodies(t)
	for _, f := range hotPath {
		body, ok := bodies[f.name]
		require.True(t, ok, "batchq.%s is not defined in any of functions.Files", f.name)
		refs := 0
		for _, stmt := range splitSQL(body) {
			r := checkStatement(stmt, f.queue)
			refs += r.refs
			for _, v := range r.violations {
				t.Errorf("%s: %s: alias %s of batchq.%s has no queue predicate", f.name, v.excerpt, v.alias, v.table)
			}
		}
		// A checker that finds nothing checks nothing.
		if !callsOnly[f.name] && refs == 0 {
			t.Errorf("%s: found no reference to a queue table", f.name)
		}
	}
}

// The checker itself: it must fail the statements that would reach other
// queues' rows, and pass those that name their queue.
func TestCheckStatement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		stmt  string
		queue []string
		want  []string // aliases reported, in order
	}{
		{
			name: "by ids alone",
			stmt: "SELECT j.id FROM batchq.jobs j WHERE j.id = ANY (p_ids)",
			want: []string{"j"},
		},
		{
			name: "by ids within the queue",
			stmt: "SELECT j.id FROM batchq.jobs j WHERE j.queue = p_queue AND j.id = ANY (p_ids)",
		},
		{
			name: "AS before the alias, the queue on the left",
			stmt: "SELECT j.id FROM batchq.jobs AS j WHERE p_queue = j.queue",
		},
		{
			name: "another variable than the function's queue",
			stmt: "SELECT j.id FROM batchq.jobs j WHERE j.queue = p_queue_other",
			want: []string{"j"},
		},
		{
			name: "the queue only through a join with another table",
			stmt: "SELECT c.round FROM batchq.queues q LEFT JOIN batchq.queue_cursors c ON c.queue = q.name WHERE q.name = p_queue",
			want: []string{"c"},
		},
		{
			name: "a predicate in a subquery does not cover the outer reference",
			stmt: "DELETE FROM batchq.jobs j WHERE j.id IN (SELECT o.job_id FROM batchq.outcomes o WHERE o.queue = p_queue)",
			want: []string{"j"},
		},
		{
			name: "an alias used twice needs its predicate twice",
			stmt: "UPDATE batchq.jobs j SET cum = 0 FROM (SELECT j.id FROM batchq.jobs j WHERE j.queue = p_queue) s WHERE j.id = s.id",
			want: []string{"j"},
		},
		{
			name: "the same with both predicates",
			stmt: "WITH s AS (SELECT j.id FROM batchq.jobs j WHERE j.queue = p_queue ORDER BY j.id FOR UPDATE) " +
				"UPDATE batchq.jobs j SET cum = 0 FROM s WHERE j.queue = p_queue AND j.id = s.id",
		},
		{
			name:  "a comma join in a trigger",
			stmt:  "SELECT j.seq FROM batchq.jobs j, batchq.tenant_ring r WHERE j.queue = NEW.queue AND r.queue = NEW.queue",
			queue: []string{"NEW.queue"},
		},
		{
			name: "a comma join with the wrong queue expression",
			stmt: "SELECT j.seq FROM batchq.jobs j, batchq.tenant_ring r WHERE j.queue = NEW.queue AND r.queue = NEW.queue",
			want: []string{"j", "r"},
		},
		{
			name:  "a bare queue argument is not a prefix match",
			stmt:  "SELECT j.id FROM batchq.jobs j WHERE j.queue = queue_name",
			queue: []string{"queue"},
			want:  []string{"j"},
		},
		{
			name: "an insert names its queue in its values",
			stmt: "INSERT INTO batchq.ledger_adjustments (queue, tenant, pos, after_seq, delta) SELECT p_queue, e.tenant, e.pos, e.seq, -e.cost FROM expired e",
		},
		{
			name: "an insert whose source reads another queue's rows",
			stmt: "INSERT INTO batchq.outcomes (job_id, queue) SELECT j.id, j.queue FROM batchq.jobs j WHERE j.state = 'queued'",
			want: []string{"j"},
		},
		{
			name: "a ctid-pinned update whose probe names the queue",
			stmt: "UPDATE batchq.tenant_ring r SET cum = a.cum FROM (SELECT i.tenant, i.cum, " +
				"(SELECT x.ctid FROM batchq.tenant_ring x WHERE x.queue = p_queue AND x.tenant = i.tenant) AS rid " +
				"FROM ins i) a WHERE r.ctid = a.rid",
		},
		{
			name: "a ctid-pinned update whose probe does not",
			stmt: "UPDATE batchq.tenant_ring r SET cum = a.cum FROM (SELECT i.tenant, i.cum, " +
				"(SELECT x.ctid FROM batchq.tenant_ring x WHERE x.tenant = i.tenant) AS rid " +
				"FROM ins i) a WHERE r.ctid = a.rid",
			want: []string{"x"},
		},
		{
			name: "a ctid-pinned update with no probe",
			stmt: "UPDATE batchq.tenant_ring r SET cum = 0 WHERE r.ctid = v_rid",
			want: []string{"r"},
		},
		{
			name: "a ctid pin on a read is no exemption",
			stmt: "SELECT r.cum FROM batchq.tenant_ring r WHERE r.ctid = (SELECT x.ctid FROM batchq.tenant_ring x WHERE x.queue = p_queue)",
			want: []string{"r"},
		},
		{
			name: "names in string literals are not references",
			stmt: "SELECT nextval('batchq.jobs_id_seq'), 'FROM batchq.jobs j'",
		},
		{
			name: "other tables are not checked",
			stmt: "SELECT q.lease FROM batchq.queues q, batchq.tenants w WHERE q.name = w.name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			queue := tt.queue
			if queue == nil {
				queue = []string{"p_queue"}
			}
			var got []string
			for _, v := range checkStatement(tt.stmt, queue).violations {
				got = append(got, v.alias)
			}
			require.Equal(t, tt.want, got)
		})
	}
}

func TestSplitSQL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "comments go, statements split",
			src:  "SELECT 1; -- FROM batchq.jobs j;\nSELECT 2;",
			want: []string{"SELECT 1", "SELECT 2"},
		},
		{
			name: "semicolons and dashes in strings stay",
			src:  "SELECT 'a;b', 'it''s -- not a comment', \"x;y\"; SELECT 3",
			want: []string{"SELECT 'a;b', 'it''s -- not a comment', \"x;y\"", "SELECT 3"},
		},
		{
			name: "a dollar-quoted body is one piece",
			src:  "CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END $$; SELECT $tag$ ; $$ $tag$",
			want: []string{"CREATE FUNCTION f() RETURNS int AS $$ BEGIN RETURN 1; END $$", "SELECT $tag$ ; $$ $tag$"},
		},
		{
			name: "a dollar that opens no quote",
			src:  "SELECT s ~ '^a$' AND $1 > 0; SELECT 4",
			want: []string{"SELECT s ~ '^a$' AND $1 > 0", "SELECT 4"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, splitSQL(tt.src))
		})
	}
}

func FuzzCheckStatement(f *testing.F) {
	f.Add("SELECT j.id FROM batchq.jobs j WHERE j.id = ANY (p_ids)")
	f.Add("UPDATE batchq.tenant_ring r SET cum = 0 FROM (SELECT (SELECT x.ctid FROM batchq.tenant_ring x WHERE x.queue = p_queue) AS rid) a WHERE r.ctid = a.rid")
	f.Add("SELECT 'a;b' -- c\n; SELECT $q$ $$ $q$; INSERT INTO batchq.jobs (queue) VALUES ((")
	f.Fuzz(func(t *testing.T, src string) {
		for _, stmt := range splitSQL(src) {
			checkStatement(stmt, []string{"p_queue"})
		}
	})
}

// functionBodies reads every file of functions.Files and returns each
// batchq function's body (its dollar-quoted text) by name.
func functionBodies(t *testing.T) map[string]string {
	t.Helper()
	header := regexp.MustCompile(`(?is)^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+batchq\.(\w+)\s*\(`)
	bodies := map[string]string{}
	for _, file := range functions.Files {
		text, err := fs.ReadFile(functions.FS, file)
		require.NoError(t, err)
		for _, stmt := range splitSQL(string(text)) {
			m := header.FindStringSubmatch(stmt)
			if m == nil {
				continue
			}
			body, ok := dollarBody(stmt)
			if !ok {
				continue // a single-expression SQL function (RETURN …), no body
			}
			_, dup := bodies[m[1]]
			require.False(t, dup, "batchq.%s is defined twice (%s)", m[1], file)
			bodies[m[1]] = body
		}
	}
	return bodies
}

var dollarTagRe = regexp.MustCompile(`^\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$`)

// dollarBody returns the text of the first dollar-quoted string in stmt.
func dollarBody(stmt string) (string, bool) {
	for i := 0; i < len(stmt); i++ {
		switch stmt[i] {
		case '\'', '"':
			i = closeQuote(stmt, i) - 1
		case '$':
			tag := dollarTagRe.FindString(stmt[i:])
			if tag == "" {
				continue
			}
			start := i + len(tag)
			end := strings.Index(stmt[start:], tag)
			if end < 0 {
				return "", false
			}
			return stmt[start : start+end], true
		}
	}
	return "", false
}

// splitSQL drops -- comments and splits src on the semicolons outside
// quoted identifiers, string literals and dollar-quoted strings. It handles
// how batchq's files are written, not all of SQL: no escape strings
// (E'\n'), no /* */ comments.
func splitSQL(src string) []string {
	var out []string
	var b strings.Builder
	flush := func() {
		if s := strings.TrimSpace(b.String()); s != "" {
			out = append(out, s)
		}
		b.Reset()
	}
	for i := 0; i < len(src); {
		switch c := src[i]; {
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			if nl := strings.IndexByte(src[i:], '\n'); nl >= 0 {
				i += nl
			} else {
				i = len(src)
			}
		case c == '\'' || c == '"':
			end := closeQuote(src, i)
			b.WriteString(src[i:end])
			i = end
		case c == '$' && dollarTagRe.MatchString(src[i:]):
			tag := dollarTagRe.FindString(src[i:])
			end := len(src)
			if j := strings.Index(src[i+len(tag):], tag); j >= 0 {
				end = i + len(tag) + j + len(tag)
			}
			b.WriteString(src[i:end])
			i = end
		case c == ';':
			flush()
			i++
		default:
			b.WriteByte(c)
			i++
		}
	}
	flush()
	return out
}

// closeQuote returns the index just past the quote that closes the one at
// src[i] (a doubled quote is one character of the string), or len(src).
func closeQuote(src string, i int) int {
	q := src[i]
	for j := i + 1; j < len(src); j++ {
		if src[j] != q {
			continue
		}
		if j+1 < len(src) && src[j+1] == q {
			j++
			continue
		}
		return j + 1
	}
	return len(src)
}

// maskLiterals blanks the inside of string literals and dollar-quoted
// strings, keeping every offset, so that neither names nor parentheses in
// them count.
func maskLiterals(stmt string) string {
	b := []byte(stmt)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '\'':
			end := closeQuote(stmt, i)
			for k := i + 1; k < end-1; k++ {
				b[k] = ' '
			}
			i = end - 1
		case b[i] == '"':
			i = closeQuote(stmt, i) - 1
		case b[i] == '$' && dollarTagRe.MatchString(stmt[i:]):
			tag := dollarTagRe.FindString(stmt[i:])
			end := len(b)
			if j := strings.Index(stmt[i+len(tag):], tag); j >= 0 {
				end = i + len(tag) + j
			}
			for k := i + len(tag); k < end; k++ {
				b[k] = ' '
			}
			i = end + len(tag) - 1
		}
	}
	return string(b)
}

var (
	tableRe = regexp.MustCompile(`(?i)\bbatchq\.(` + strings.Join(queueTables, "|") + `)\b`)
	// The word after the table: its alias, unless it is a keyword.
	aliasRe    = regexp.MustCompile(`(?i)^\s+(?:AS\s+)?([A-Za-z_][A-Za-z0-9_]*)`)
	prevRe     = regexp.MustCompile(`(?i)([A-Za-z_]+)\s*$`)
	notAnAlias = map[string]bool{
		"WHERE": true, "SET": true, "ON": true, "JOIN": true, "LEFT": true, "RIGHT": true, "INNER": true,
		"FULL": true, "CROSS": true, "NATURAL": true, "LATERAL": true, "USING": true, "ORDER": true,
		"GROUP": true, "HAVING": true, "WINDOW": true, "LIMIT": true, "OFFSET": true, "FETCH": true,
		"FOR": true, "RETURNING": true, "UNION": true, "EXCEPT": true, "INTERSECT": true, "WITH": true,
		"SELECT": true, "VALUES": true, "OVERRIDING": true, "DEFAULT": true, "AS": true,
	}
)

type violation struct {
	alias, table, excerpt string
}

type checked struct {
	refs       int // references checked (inserts into a table are not)
	violations []violation
}

type tableRef struct {
	table, alias string
	start, end   int // the match of batchq.<table>
	exempt       bool
	scope        [2]int // the innermost parentheses around it, or the statement
}

// checkStatement checks one statement: each reference to a table
// distributed by queue, other than an INSERT's target, needs a predicate
// <alias>.queue = <one of queue> in the innermost parentheses around it
// (a subquery, a CTE's body), or in the statement when none; an alias that
// names several references there needs as many predicates.
func checkStatement(stmt string, queue []string) checked {
	masked := maskLiterals(stmt)
	groups := parenGroups(masked)
	var refs []tableRef
	for _, m := range tableRe.FindAllStringSubmatchIndex(masked, -1) {
		r := tableRef{table: strings.ToLower(masked[m[2]:m[3]]), start: m[0], end: m[1]}
		prev := strings.ToUpper(lastWord(masked[:m[0]]))
		if prev == "INTO" {
			continue // the target of an INSERT: its rows name their queue in its values
		}
		r.alias = r.table
		if a := aliasRe.FindStringSubmatch(masked[m[1]:]); a != nil && !notAnAlias[strings.ToUpper(a[1])] {
			r.alias = a[1]
		}
		r.scope = innermost(groups, m[0], len(masked))
		// The ctid-pinned update of a ring row (docs/design/plans.md, "The
		// ctid probe"): the row is found by a probe of its (queue, tenant),
		// a reference this check holds to the rule like any other, and the
		// update reaches that one row through the ctid the probe returned.
		// On one server that keeps it to the queue; on a cluster it becomes
		// a (queue, tenant) probe (docs/design/scale-out.md).
		if prev == "UPDATE" {
			scope := masked[r.scope[0]:r.scope[1]]
			r.exempt = regexp.MustCompile(`(?i)(?:^|[^\w.])`+regexp.QuoteMeta(r.alias)+`\.ctid\s*=`).MatchString(scope) &&
				hasCtidProbe(scope, r.table)
		}
		refs = append(refs, r)
	}

	var out checked
	for _, r := range refs {
		if r.exempt {
			continue
		}
		out.refs++
		need := 0
		for _, o := range refs {
			if !o.exempt && o.alias == r.alias && o.start >= r.scope[0] && o.end <= r.scope[1] {
				need++
			}
		}
		if countQueuePredicates(masked[r.scope[0]:r.scope[1]], r.alias, queue) < need {
			out.violations = append(out.violations, violation{alias: r.alias, table: r.table, excerpt: excerpt(stmt, r.start, r.end)})
		}
	}
	return out
}

// countQueuePredicates counts <alias>.queue = <queue> and <queue> =
// <alias>.queue in scope.
func countQueuePredicates(scope, alias string, queue []string) int {
	qs := make([]string, len(queue))
	for i, q := range queue {
		qs[i] = regexp.QuoteMeta(q)
	}
	col := regexp.QuoteMeta(alias) + `\.queue`
	val := `(?:` + strings.Join(qs, "|") + `)`
	re := regexp.MustCompile(`(?i)(?:^|[^\w.])(?:` + col + `\s*=\s*` + val + `|` + val + `\s*=\s*` + col + `)(?:$|[^\w.])`)
	return len(re.FindAllStringIndex(scope, -1))
}

var ctidProbeRe = regexp.MustCompile(`(?i)\bSELECT\s+([A-Za-z_]\w*)\.ctid\s+FROM\s+batchq\.(\w+)\s+(?:AS\s+)?([A-Za-z_]\w*)`)

// hasCtidProbe reports whether scope selects the ctid of a row of table by
// a reference of its own.
func hasCtidProbe(scope, table string) bool {
	for _, m := range ctidProbeRe.FindAllStringSubmatch(scope, -1) {
		if strings.EqualFold(m[2], table) && m[1] == m[3] {
			return true
		}
	}
	return false
}

func lastWord(s string) string {
	if m := prevRe.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// parenGroups returns the span inside each pair of parentheses of s.
func parenGroups(s string) [][2]int {
	var groups [][2]int
	var open []int
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			open = append(open, i)
		case ')':
			if len(open) > 0 {
				groups = append(groups, [2]int{open[len(open)-1] + 1, i})
				open = open[:len(open)-1]
			}
		}
	}
	return groups
}

// innermost returns the smallest group around pos, or [0, n).
func innermost(groups [][2]int, pos, n int) [2]int {
	best := [2]int{0, n}
	for _, g := range groups {
		if g[0] <= pos && pos < g[1] && g[1]-g[0] < best[1]-best[0] {
			best = g
		}
	}
	return best
}

// excerpt shows the statement around a reference, on one line.
func excerpt(stmt string, start, end int) string {
	from, to := max(0, start-70), min(len(stmt), end+70)
	s := strings.Join(strings.Fields(stmt[from:to]), " ")
	if from > 0 {
		s = "…" + s
	}
	if to < len(stmt) {
		s += "…"
	}
	return fmt.Sprintf("%q", s)
}
