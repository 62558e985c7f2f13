package benchkit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Machine describes where a report was measured: the client machine and the
// Postgres server.
type Machine struct {
	Cores       int    `json:"cores"`
	CPU         string `json:"cpu,omitempty"`
	MemoryBytes int64  `json:"memory_bytes,omitempty"`
	OS          string `json:"os"`
	Arch        string `json:"arch"`
	Go          string `json:"go"`
	// LoadAvg is the 1, 5 and 15-minute load averages when the scenario
	// started: anything else running skews the numbers.
	LoadAvg string `json:"load_avg,omitempty"`

	Postgres        string    `json:"postgres"`          // version()
	PostgresHost    string    `json:"postgres_host"`     // the server's address, as the client sees it
	PostgresSetting []Setting `json:"postgres_settings"` // in the order listed by settingNames
}

// Setting is one Postgres setting as SHOW prints it.
type Setting struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// settingNames are the server settings that move a queue's numbers most.
var settingNames = []string{
	"shared_buffers", "synchronous_commit", "max_connections", "fsync", "wal_level",
	"max_wal_size", "checkpoint_timeout", "work_mem", "effective_cache_size",
	"random_page_cost", "autovacuum", "jit",
}

// DescribeMachine reads this machine and the server of pool.
func DescribeMachine(ctx context.Context, pool *pgxpool.Pool) (Machine, error) {
	m := Machine{
		Cores:       runtime.NumCPU(),
		CPU:         cpuModel(),
		MemoryBytes: memTotal(),
		OS:          runtime.GOOS,
		Arch:        runtime.GOARCH,
		Go:          runtime.Version(),
		LoadAvg:     loadAvg(),
	}
	cc := pool.Config().ConnConfig
	m.PostgresHost = fmt.Sprintf("%s:%d", cc.Host, cc.Port)
	if err := pool.QueryRow(ctx, `SELECT version()`).Scan(&m.Postgres); err != nil {
		return m, fmt.Errorf("benchkit: server version: %w", err)
	}
	for _, name := range settingNames {
		var v string
		if err := pool.QueryRow(ctx, `SELECT current_setting($1, true)`, name).Scan(&v); err != nil {
			return m, fmt.Errorf("benchkit: setting %s: %w", name, err)
		}
		m.PostgresSetting = append(m.PostgresSetting, Setting{name, v})
	}
	return m, nil
}

// Summary is the machine on one line.
func (m Machine) Summary() string {
	s := fmt.Sprintf("%d cores", m.Cores)
	if m.CPU != "" {
		s += " (" + m.CPU + ")"
	}
	if m.MemoryBytes > 0 {
		s += fmt.Sprintf(", %.1f GiB RAM", float64(m.MemoryBytes)/(1<<30))
	}
	s += fmt.Sprintf(", %s/%s, %s", m.OS, m.Arch, m.Go)
	if m.LoadAvg != "" {
		s += ", load average " + m.LoadAvg + " at start"
	}
	return s
}

// PostgresSummary is the server and its settings on one line.
func (m Machine) PostgresSummary() string {
	v := m.Postgres
	if i := strings.Index(v, " on "); i > 0 {
		v = v[:i]
	}
	parts := []string{v, "at " + m.PostgresHost}
	for _, s := range m.PostgresSetting {
		parts = append(parts, s.Name+"="+s.Value)
	}
	return strings.Join(parts, " ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
