package queue_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batchq/batchq/queue"
)

// A provider that quotes the request's key back (in an error, say) does not
// get it into the stored result or error.
func TestHTTPHandlerRedactsHeaderSecrets(t *testing.T) {
	t.Parallel()
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		w.Write([]byte(`{"echo":"` + r.Header.Get("Authorization") + `","usage":{"input_tokens":3,"output_tokens":4}}`))
	}))
	defer srv.Close()
	h, err := queue.HTTPHandler(queue.HTTPConfig{Target: srv.URL, Header: http.Header{"Authorization": {"Bearer sk-live-0123456789"}}})
	require.NoError(t, err)
	job := &queue.Job{ID: 7, Tenant: "t", Attempt: 1, Payload: []byte(`{}`)}

	res, err := h(context.Background(), job)
	require.NoError(t, err)
	require.NotContains(t, string(res.Output), "sk-live")
	require.Contains(t, string(res.Output), "[redacted]")
	require.Equal(t, int64(7), res.ActualCost, "input_tokens + output_tokens")

	status = http.StatusUnauthorized
	_, err = h(context.Background(), job)
	require.Error(t, err)
	require.True(t, queue.IsPermanent(err), "a 401 is not retried")
	require.NotContains(t, err.Error(), "sk-live")

	status = http.StatusTooManyRequests
	_, err = h(context.Background(), job)
	require.True(t, errors.Is(err, queue.ErrRateLimited))

	status = http.StatusServiceUnavailable
	_, err = h(context.Background(), job)
	require.Error(t, err)
	require.False(t, queue.IsPermanent(err), "a 503 is retried")
}

// A network error does not get a key in the target URL, as user or in the
// query, into the stored error; net/http's own error repeats the URL.
func TestHTTPHandlerRedactsTargetCredentials(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close() // nothing listens there now
	job := &queue.Job{ID: 7, Tenant: "t", Attempt: 1, Payload: []byte(`{}`)}
	for target, shown := range map[string]string{
		"http://sk-SECRET1@" + addr + "/v1":                        "http://redacted@" + addr + "/v1",
		"http://" + addr + "/v1beta/models/m:generate?key=SECRET2": "http://" + addr + "/v1beta/models/m:generate?redacted",
	} {
		h, err := queue.HTTPHandler(queue.HTTPConfig{Target: target})
		require.NoError(t, err)
		_, err = h(context.Background(), job)
		require.Error(t, err)
		require.NotContains(t, err.Error(), "SECRET")
		require.Contains(t, err.Error(), "batchq: POST "+shown+": ")
		require.False(t, queue.IsPermanent(err), "a network error is retried")
	}

	_, err := queue.HTTPHandler(queue.HTTPConfig{Target: "localhost:8080/v1"})
	require.ErrorContains(t, err, "must be an http or https URL")
}
