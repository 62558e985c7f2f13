package quotaheaders_test

import (
	"net/http"
	"testing"

	qh "github.com/batchq/batchq/quotaheaders"
)

// The headers of typical 200 responses, as net/http hands them over.

func openAIResponse() http.Header {
	return hdr(
		"Date", "Mon, 26 May 2025 05:00:04 GMT",
		"Content-Type", "application/json",
		"Transfer-Encoding", "chunked",
		"Connection", "keep-alive",
		"Access-Control-Expose-Headers", "X-Request-ID",
		"Openai-Organization", "user-abc123",
		"Openai-Processing-Ms", "412",
		"Openai-Version", "2020-10-01",
		"Strict-Transport-Security", "max-age=31536000; includeSubDomains; preload",
		"X-Ratelimit-Limit-Requests", "5000",
		"X-Ratelimit-Limit-Tokens", "160000",
		"X-Ratelimit-Remaining-Requests", "4999",
		"X-Ratelimit-Remaining-Tokens", "159976",
		"X-Ratelimit-Reset-Requests", "12ms",
		"X-Ratelimit-Reset-Tokens", "2m59.56s",
		"X-Request-Id", "req_3a8b1a44a02c4a07b51d1c88acec4c4f",
		"Cf-Cache-Status", "DYNAMIC",
		"Server", "cloudflare",
	)
}

func anthropicResponse() http.Header {
	return hdr(
		"Date", "Thu, 10 Apr 2025 15:30:00 GMT",
		"Content-Type", "application/json",
		"Transfer-Encoding", "chunked",
		"Connection", "keep-alive",
		"Anthropic-Ratelimit-Requests-Limit", "1000",
		"Anthropic-Ratelimit-Requests-Remaining", "978",
		"Anthropic-Ratelimit-Requests-Reset", "2025-04-10T15:30:01Z",
		"Anthropic-Ratelimit-Input-Tokens-Limit", "80000",
		"Anthropic-Ratelimit-Input-Tokens-Remaining", "79000",
		"Anthropic-Ratelimit-Input-Tokens-Reset", "2025-04-10T15:30:01Z",
		"Anthropic-Ratelimit-Output-Tokens-Limit", "16000",
		"Anthropic-Ratelimit-Output-Tokens-Remaining", "15800",
		"Anthropic-Ratelimit-Output-Tokens-Reset", "2025-04-10T15:30:00Z",
		"Anthropic-Ratelimit-Tokens-Limit", "96000",
		"Anthropic-Ratelimit-Tokens-Remaining", "94800",
		"Anthropic-Ratelimit-Tokens-Reset", "2025-04-10T15:30:01Z",
		"Request-Id", "req_018EeWyXxfu5pfWkrYcMdjWG",
		"Anthropic-Organization-Id", "9e2a4b6c-0000-0000-0000-000000000000",
		"Via", "1.1 google",
		"Cf-Cache-Status", "DYNAMIC",
		"Server", "cloudflare",
	)
}

func benchmarkParse(b *testing.B, h http.Header) {
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := qh.Parse(h, at, qh.Tokens); !ok {
			b.Fatal("no tokens quota")
		}
	}
}

// BenchmarkParseOpenAI reads the tokens quota of a typical OpenAI response.
func BenchmarkParseOpenAI(b *testing.B) { benchmarkParse(b, openAIResponse()) }

// BenchmarkParseAnthropic reads the tokens quota of a typical Anthropic
// response: three token candidates with RFC 3339 resets.
func BenchmarkParseAnthropic(b *testing.B) { benchmarkParse(b, anthropicResponse()) }
