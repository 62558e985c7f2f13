package metrics

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
)

// samples is a scrape: each sample's value by its series as the text format
// writes it, name{label="value",...}.
type samples map[string]float64

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?) (\S+)$`)

func parseSamples(t testing.TB, r io.Reader) samples {
	t.Helper()
	out := samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		require.NotNil(t, m, "unparsable line %q", line)
		v, err := strconv.ParseFloat(m[2], 64)
		require.NoError(t, err, line)
		out[m[1]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// collect registers c alone and scrapes it through promhttp.
func collect(t testing.TB, c prometheus.Collector) samples {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	return parseSamples(t, rec.Body)
}

// scrape GETs a metrics endpoint.
func scrape(t testing.TB, url string) samples {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return parseSamples(t, resp.Body)
}

// series spells a series as the text format does: labels in the order given,
// which must be the format's (sorted by name, le last).
func series(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i := 0; i < len(labels); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(labels[i] + "=" + strconv.Quote(labels[i+1]))
	}
	b.WriteByte('}')
	return b.String()
}

// values returns the label values of name's series for one label.
func (s samples) values(name, label string) map[string]bool {
	out := map[string]bool{}
	re := regexp.MustCompile(`[{,]` + label + `="((?:[^"\\]|\\.)*)"`)
	for k := range s {
		if !strings.HasPrefix(k, name+"{") {
			continue
		}
		if m := re.FindStringSubmatch(k); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// sum adds the samples of name whose series contain every label="value" of
// match.
func (s samples) sum(name string, match ...string) float64 {
	var total float64
next:
	for k, v := range s {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		for i := 0; i < len(match); i += 2 {
			l := match[i] + "=" + strconv.Quote(match[i+1])
			if !strings.Contains(k, "{"+l) && !strings.Contains(k, ","+l) {
				continue next
			}
		}
		total += v
	}
	return total
}
