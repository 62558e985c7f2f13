// Package quotaheaders reads what an LLM provider's response headers say is
// left of the rate-limit quota, so the throttle can pace calls from the
// provider's own numbers instead of a guess.
//
// [Parse] turns the headers of one response into a [Snapshot] for one
// [Unit], requests or tokens: the remaining count, and the limit and the
// time until the window resets when the response says them. [ParseCalls]
// reads the same for pacing calls whose cost counts a whole call: it leaves
// out a quota of one side of a call (Anthropic's input or output tokens)
// until that quota is used up. [RetryAfter]
// reads how long a throttled response asks the client to wait, and
// [ParseDuration] reads the Go-style durations several providers use.
//
// The package never guesses. A malformed part of a response is unknown: a
// bad limit or reset leaves HasLimit or HasReset false, a bad remaining
// count drops that candidate, and nothing panics or comes out negative.
//
// # Dialects
//
// The IETF RateLimit draft, in each of its generations: separate
// RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset fields (drafts
// -00 to -06); the -07 Dictionary "RateLimit: limit=100, remaining=50,
// reset=5"; and the -08+ pair `RateLimit-Policy: "p";q=100;w=60` and
// `RateLimit: "p";r=50;t=30`, parsed as RFC 8941 structured fields. In
// drafts -01 to -03 (and draft-polli-ratelimit-headers before them, which
// names w "window") RateLimit-Limit is a list whose first member is the
// limit in force and whose others describe quota policies,
// "10, 10;w=1, 50;w=60"; it is read as an RFC 8941 List or, failing that,
// in the HTTP list syntax of -01, which also allows
// "10, 10 ; w=1 ; Burst=1000".
//
// OpenAI, Groq and Azure OpenAI x-ratelimit-{limit,remaining,reset}-{requests,tokens}.
// Azure also spells them x-rate-limit- and mixes the spellings in one
// response (a 429 with x-rate-limit-reset-tokens: 55 beside
// x-ratelimit-remaining-requests); the two spellings of a name are one
// field, and their resets are read alike. The same names with a window,
// each window its own candidate: Cerebras' -requests-day, -requests-minute
// and -tokens-minute, Mistral's -req-minute, -tokens-minute and
// -tokens-month (the -minute, -hour, -day and -month windows are read for
// requests, req and tokens alike). Anthropic
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
// with RFC 3339 resets. Together's x-tokenlimit-* for tokens. The classic
// X-RateLimit-{Limit,Remaining,Reset} of GitHub, OpenRouter, GitLab and
// WHOOP, also spelled X-Rate-Limit-, for requests, with GitHub's
// X-RateLimit-Used; its limit is a count or, as WHOOP sends it, the early
// drafts' list "100, 100;window=60, 10000;window=86400", whose first member
// is the limit. Retry-After, retry-after-ms and Azure's x-ms-retry-after-ms.
//
// Names are matched exactly, ignoring case: OpenAI's
// x-ratelimit-remaining-tokens_usage_based and Anthropic's
// anthropic-priority-* fields (a Priority Tier commitment, not quota left)
// are not read.
//
// # Rules
//
//   - Names are case-insensitive, values are trimmed of spaces and tabs, and
//     an empty value is absent.
//   - A candidate exists only when its remaining count is valid. Counts are
//     plain non-negative decimal integers that fit in an int64: "0" is valid,
//     Azure's "-1", "+5", "0x10" and "1e3" are not. With no remaining but a
//     limit and X-RateLimit-Used, GitHub's remaining is max(0, limit-used).
//   - Reset values: an unsigned Go duration ("6m0s") is relative; a bare
//     decimal is delta seconds below 1e9, epoch seconds below 1e11 and epoch
//     milliseconds from there on; RFC 3339 timestamps (offsets honoured) and
//     HTTP-dates are absolute, and a time already past is 0. Anything else,
//     and anything that overflows a time.Duration, is unknown. Conversion is
//     exact, with integers: "2m59.56s" is 179.56 s to the nanosecond, and a
//     fraction of a nanosecond rounds up, so a client never wakes early.
//   - Repeated lines of a single-value field: the lowest remaining, the
//     longest reset and the first valid limit. The lines of a per-unit
//     x-ratelimit-* name and of its x-rate-limit-* spelling are lines of
//     one field, x-ratelimit-*'s first; the classic X-RateLimit-* and
//     X-Rate-Limit-* remain two dialects.
//   - A limit list of the early drafts (RateLimit-Limit, X-RateLimit-Limit)
//     gives its first member, and only if the whole list is well formed.
//     Empty members are ignored (RFC 9110 §5.6.1). In X-RateLimit-Limit
//     every member after the first must carry a window of whole seconds,
//     w or window, so "1,000" is invalid, not the limit 1.
//   - Structured fields: lines of one name are joined and parsed as one
//     field, and a syntax error drops the whole field. An item without a
//     valid r is dropped. Its limit and unit come from the policy of the
//     same name: qu absent or "requests" is requests, "tokens" is tokens,
//     other units are ignored. An item with no policy of its name counts
//     requests with an unknown limit; a RateLimit-Policy field that does not
//     parse leaves every item's unit unknown, so none is reported. w is a
//     window, not a reset; t (and the -07 reset) follows the bare-number rule.
//   - Most restrictive, per unit: the lowest remaining; on a tie the longer
//     reset, an unknown reset counting as shortest; then the first seen. The
//     limit is the chosen candidate's. No reset is inferred from a window's
//     name. http.Header keeps no order across names, so "first seen" is the
//     order of items within a structured field, then a fixed order of
//     dialects: IETF structured fields, IETF separate fields, the per-unit
//     x-ratelimit-* names, Anthropic (tokens, then input-tokens, then
//     output-tokens), Together, classic X-RateLimit-*.
//   - Retry-After: retry-after-ms, then x-ms-retry-after-ms, then
//     Retry-After; the first field with a valid value wins. Seconds may be
//     decimal; all three HTTP-date forms are read, the two-digit year of the
//     RFC 850 form resolved as RFC 9110 §5.6.7 says; a past date is 0;
//     several lines take the longest; "5, 10" is invalid; a huge value that
//     fits in a time.Duration is returned as it is.
//
// # Concurrency
//
// Every function is pure: it reads its arguments, keeps no state and does
// not modify the header, so all are safe for concurrent use. Time is an
// argument: pass the instant the response arrived, and relative values are
// measured from it.
package quotaheaders
