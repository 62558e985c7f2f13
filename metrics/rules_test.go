package metrics

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"

	"github.com/batchq/batchq/throttle"
)

const alertRules = "../deploy/prometheus/batchq-alerts.yml"

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var (
	descLabels   = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	metricRef    = regexp.MustCompile(`\bbatchq_[a-z0-9_]+\b`)
	selector     = regexp.MustCompile(`\b(batchq_[a-z0-9_]+)\{([^}]*)\}`)
	matcher      = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
	grouping     = regexp.MustCompile(`\b(?:by|on|without|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	templateUses = regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// exported maps each series name the collector can export to its labels;
// a histogram's are its _bucket (with le), _count and _sum.
func exported(t *testing.T) map[string]map[string]bool {
	t.Helper()
	c, _ := newTestCollector(t, Config{})
	out := map[string]map[string]bool{}
	add := func(col prometheus.Collector, histogram bool) {
		for _, d := range descs(col) {
			name := descName.FindStringSubmatch(d.String())[1]
			labels := map[string]bool{}
			if m := descLabels.FindStringSubmatch(d.String()); m != nil && m[1] != "" {
				for _, l := range strings.Split(m[1], ",") {
					labels[strings.TrimSpace(l)] = true
				}
			}
			out[name] = labels
			if histogram {
				withLE := map[string]bool{"le": true}
				for l := range labels {
					withLE[l] = true
				}
				out[name+"_bucket"], out[name+"_count"], out[name+"_sum"] = withLE, labels, labels
				delete(out, name) // no series has the bare name
			}
		}
	}
	add(c, false)
	for _, v := range c.events {
		_, histogram := v.(*prometheus.HistogramVec)
		add(v, histogram)
	}
	return out
}

// The example alert rules parse, and use only metrics and labels the
// collector exports, so renaming a metric cannot silently break them.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(alertRules)
	require.NoError(t, err)
	var rf ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&rf))

	metrics := exported(t)
	known := map[string]bool{"instance": true, "job": true} // added by Prometheus to every target
	for _, labels := range metrics {
		for l := range labels {
			known[l] = true
		}
	}
	values := map[string][]string{
		"priority": {throttle.Batch.String(), throttle.Interactive.String()},
		"unit":     {"requests", "tokens"},
	}

	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		require.NotEmpty(t, g.Name)
		for _, r := range g.Rules {
			alerts[r.Alert] = true
			require.NotEmpty(t, r.Alert)
			require.NotEmpty(t, r.Expr, r.Alert)
			_, err := time.ParseDuration(r.For)
			require.NoError(t, err, "%s: for", r.Alert)
			require.NotEmpty(t, r.Labels["severity"], r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.Equal(t, strings.Count(r.Expr, "("), strings.Count(r.Expr, ")"), "%s: unbalanced parentheses", r.Alert)

			names := metricRef.FindAllString(r.Expr, -1)
			require.NotEmpty(t, names, r.Alert)
			for _, n := range names {
				_, ok := metrics[n]
				require.True(t, ok, "%s uses %s, which the collector does not export", r.Alert, n)
			}
			for _, sel := range selector.FindAllStringSubmatch(r.Expr, -1) {
				for _, m := range strings.Split(sel[2], ",") {
					mm := matcher.FindStringSubmatch(m)
					require.NotNil(t, mm, "%s: matcher %q", r.Alert, m)
					require.True(t, metrics[sel[1]][mm[1]], "%s: %s has no label %s", r.Alert, sel[1], mm[1])
					if allowed, ok := values[mm[1]]; ok && mm[2] == "=" {
						require.Contains(t, allowed, mm[3], "%s: %s=%q", r.Alert, mm[1], mm[3])
					}
				}
			}
			for _, g := range grouping.FindAllStringSubmatch(r.Expr, -1) {
				for _, l := range strings.Split(g[1], ",") {
					require.True(t, known[strings.TrimSpace(l)], "%s: label %q is exported by no metric", r.Alert, l)
				}
			}
			for _, text := range r.Annotations {
				for _, m := range templateUses.FindAllStringSubmatch(text, -1) {
					require.True(t, known[m[1]], "%s: annotation uses $labels.%s", r.Alert, m[1])
				}
			}
		}
	}
	require.True(t, alerts["BatchqQueueNoProgress"])
	require.True(t, alerts["BatchqBatchStarvedByInteractive"])
}

// A rule whose summary says how long the condition lasted ("for 15
// minutes") fires that long after it began: its widest range plus its for
// clause, since a condition over a window holds only once the window is
// past. Every part of the condition must look over that window (a bare
// gauge would hold after the for clause alone): each series the rule reads
// is under a range or a subquery.
func TestAlertRulesFireWhenTheirSummarySays(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(alertRules)
	require.NoError(t, err)
	var f ruleFile
	require.NoError(t, yaml.Unmarshal(raw, &f))
	said := regexp.MustCompile(`for (\d+) minutes`)
	window := regexp.MustCompile(`\[(\d+[smh])(?::\d+[smh])?\]`) // a range, or a subquery's
	setOperator := regexp.MustCompile(`\b(?:unless|and|or)\b`)
	checked := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			m := said.FindStringSubmatch(r.Annotations["summary"])
			if m == nil {
				continue
			}
			for _, operand := range setOperator.Split(r.Expr, -1) {
				require.Regexp(t, window, operand, "%s: a part of the condition that holds without a window", r.Alert)
			}
			var widest time.Duration
			for _, w := range window.FindAllStringSubmatch(r.Expr, -1) {
				d, err := time.ParseDuration(w[1])
				require.NoError(t, err)
				widest = max(widest, d)
			}
			forDur, err := time.ParseDuration(r.For)
			require.NoError(t, err)
			require.Equal(t, m[1]+"m0s", (widest + forDur).String(), "%s: range %s + for %s", r.Alert, widest, forDur)
			checked++
		}
	}
	require.Positive(t, checked)
}
