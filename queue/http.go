package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// HTTPConfig configures HTTPHandler.
type HTTPConfig struct {
	// Target is the URL each job's payload is POSTed to. Required.
	Target string
	// Header is added to every request, e.g. the provider's key. Its values
	// are never logged, and are replaced by [redacted] in any response body
	// before it is stored.
	Header http.Header
	// Client sends the requests. nil: a client with a 2-minute timeout.
	Client *http.Client
	// MaxErrorBody is how much of a failed response's body is kept in the
	// outcome's error. 0: 512 bytes.
	MaxErrorBody int
}

// HTTPHandler returns a Handler that POSTs each job's payload to cfg.Target
// and reads the outcome from the response:
//
//   - 2xx: succeeded; the body is the result, and the actual cost is read
//     from its usage (total_tokens, or input_tokens + output_tokens);
//   - 429: handed back without using an attempt, the fleet paused per
//     Retry-After;
//   - 408, 409, 5xx and network errors: retried with backoff while attempts
//     and the deadline allow;
//   - any other 4xx: discarded (Permanent), with the status and the start of
//     the body.
//
// Each request carries Content-Type: application/json, Idempotency-Key:
// batchq-<job id>, Batchq-Job-Id, Batchq-Tenant and Batchq-Attempt, and
// cfg.Header. Every response's headers reach the pool's throttle.
func HTTPHandler(cfg HTTPConfig) (Handler, error) {
	if cfg.Target == "" {
		return nil, errors.New("batchq: HTTPHandler: Target is required")
	}
	target, err := url.Parse(cfg.Target)
	if err != nil || target.Host == "" || (target.Scheme != "http" && target.Scheme != "https") {
		return nil, fmt.Errorf("batchq: HTTPHandler: Target %q: must be an http or https URL", redactURL(cfg.Target))
	}
	shown := redactURL(cfg.Target)
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Minute}
	}
	maxBody := cfg.MaxErrorBody
	if maxBody <= 0 {
		maxBody = 512
	}
	// A provider that echoes the request (an error quoting the key it was
	// given, say) must not get a secret into outcomes.
	var secrets [][]byte
	for _, vs := range cfg.Header {
		for _, v := range vs {
			if len(v) >= 8 {
				secrets = append(secrets, []byte(v))
			}
			if _, tok, ok := strings.Cut(v, " "); ok && len(tok) >= 8 {
				secrets = append(secrets, []byte(tok)) // the key without "Bearer "
			}
		}
	}
	return func(ctx context.Context, j *Job) (Result, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.Target, bytes.NewReader(j.Payload))
		if err != nil {
			return Result{}, Permanent(fmt.Errorf("batchq: request for job %d: %w", j.ID, err))
		}
		for k, vs := range cfg.Header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		id := strconv.FormatInt(j.ID, 10)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "batchq-"+id)
		req.Header.Set("Batchq-Job-Id", id)
		req.Header.Set("Batchq-Tenant", j.Tenant)
		req.Header.Set("Batchq-Attempt", strconv.Itoa(j.Attempt))

		resp, err := client.Do(req)
		if err != nil {
			// net/http's error repeats the URL, user and query included: an
			// API key in either would be stored in the outcome's error.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return Result{}, fmt.Errorf("batchq: POST %s: %w", shown, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		for _, sec := range secrets {
			body = bytes.ReplaceAll(body, sec, []byte("[redacted]"))
		}
		res := Result{Response: resp}
		switch {
		case resp.StatusCode >= 200 && resp.StatusCode < 300:
			if err != nil {
				return res, fmt.Errorf("batchq: reading the response to job %d: %w", j.ID, err)
			}
			res.Output, res.ActualCost = body, usageTokens(body)
			return res, nil
		case resp.StatusCode == http.StatusTooManyRequests:
			return res, fmt.Errorf("%w: %s", ErrRateLimited, resp.Status)
		case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusConflict, resp.StatusCode >= 500:
			return res, fmt.Errorf("batchq: provider answered %s: %s", resp.Status, head(body, maxBody))
		default:
			return res, Permanent(fmt.Errorf("batchq: provider answered %s: %s", resp.Status, head(body, maxBody)))
		}
	}, nil
}

// usageTokens reads the tokens a provider says a call used: usage.total_tokens
// (OpenAI and most others), else usage.input_tokens + usage.output_tokens
// (Anthropic). 0: the response did not say.
func usageTokens(body []byte) int64 {
	var r struct {
		Usage *struct {
			TotalTokens  *int64 `json:"total_tokens"`
			InputTokens  int64  `json:"input_tokens"`
			OutputTokens int64  `json:"output_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(body, &r) != nil || r.Usage == nil {
		return 0
	}
	if r.Usage.TotalTokens != nil {
		return max(*r.Usage.TotalTokens, 0)
	}
	return max(r.Usage.InputTokens+r.Usage.OutputTokens, 0)
}

func head(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// redactURL drops what may hold a credential from a URL before it is logged
// or stored: its user information and its query (Gemini's ?key=, say).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// Unparsable: keep the scheme at most.
		if i := strings.Index(s, "://"); i >= 0 {
			return s[:i+3] + "…"
		}
		return "…"
	}
	if u.User != nil {
		u.User = url.User("redacted")
	}
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "redacted", false
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}
