package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/queue"
	"github.com/batchq/batchq/throttle"
)

// The Go code blocks of README.md are copied from the functions below, which
// compile; TestReadmeCodeCompiles keeps the two in step.

func readmeEnqueue(ctx context.Context, pool *pgxpool.Pool, client *queue.Client, orderID int64, payload []byte) error {
	// The job exists exactly when the business change that wanted it commits.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET state = 'imported' WHERE id = $1`, orderID); err != nil {
			return err
		}
		_, err := client.EnqueueTx(ctx, tx, queue.NewJob{
			Queue: "summaries", Tenant: "acme", Kind: "summarize",
			Cost: 1200, TTL: time.Hour, Payload: payload,
		})
		return err
	})
	var full *queue.QueueFullError
	if errors.As(err, &full) {
		// acme has full.Queued jobs waiting (its bound is full.Bound): slow down.
		return err
	}
	return err
}

func readmeWork(ctx context.Context, client *queue.Client) error {
	// Every process using this key paces from one row of batchq.quota.
	th, err := client.Throttle("openai/gpt-4o-mini", throttle.Config{Reserve: 0.2, Refill: throttle.TokenBucket})
	if err != nil {
		return err
	}
	return client.Work(ctx, queue.WorkerConfig{
		Queue: "summaries", Concurrency: 16, Throttle: th,
		Handler: func(ctx context.Context, j *queue.Job) (queue.Result, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.openai.com/v1/chat/completions", bytes.NewReader(j.Payload))
			if err != nil {
				return queue.Result{}, queue.Permanent(err) // discarded: retrying will not help
			}
			req.Header.Set("Authorization", "Bearer "+os.Getenv("OPENAI_API_KEY"))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return queue.Result{}, err // retried with backoff
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == http.StatusTooManyRequests {
				return queue.Result{Response: resp}, queue.ErrRateLimited // back in line, fleet paused
			}
			var out struct {
				Usage struct {
					TotalTokens int64 `json:"total_tokens"`
				} `json:"usage"`
			}
			_ = json.Unmarshal(body, &out)
			return queue.Result{ActualCost: out.Usage.TotalTokens, Output: body, Response: resp}, nil
		},
	})
}

func readmeInteractive(ctx context.Context, th *throttle.Throttle, req *http.Request) (*http.Response, error) {
	// A user is waiting: may use the reserve, never waits behind queued jobs.
	resp, err := queue.CallInteractive(ctx, th, 800, func(ctx context.Context) (*http.Response, error) {
		return http.DefaultClient.Do(req.WithContext(ctx))
	})
	return resp, err
}

var (
	_ = readmeEnqueue
	_ = readmeWork
	_ = readmeInteractive
)

func TestReadmeCodeCompiles(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	flat := func(s string) string {
		var lines []string
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("README.md has no Go code blocks")
	}
	for _, b := range blocks {
		if !strings.Contains(flat(string(src)), flat(b[1])) {
			t.Errorf("this README.md code block is not in queue/example_readme_test.go, so nothing compiles it:\n%s", b[1])
		}
	}
}
