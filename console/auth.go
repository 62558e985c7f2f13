package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
)

// sessionCookie holds a signed-in browser's session: a random nonce and its
// MAC under the token, so the server keeps no state and a new token ends
// every session.
const sessionCookie = "batchq_console"

// auth checks the token, sessions and CSRF tokens. The zero value (no token)
// refuses every action.
type auth struct{ token string }

func (a auth) enabled() bool { return a.token != "" }

func (a auth) mac(purpose, nonce string) string {
	m := hmac.New(sha256.New, []byte(a.token))
	m.Write([]byte(purpose + "|" + nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// checkToken reports whether s is the token, in constant time.
func (a auth) checkToken(s string) bool {
	return a.enabled() && subtle.ConstantTimeCompare([]byte(s), []byte(a.token)) == 1
}

// newSession returns a cookie value for a new session.
func (a auth) newSession() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	nonce := hex.EncodeToString(b)
	return nonce + "." + a.mac("session", nonce)
}

// session returns the nonce of r's session, "" without a valid one.
func (a auth) session(r *http.Request) string {
	if !a.enabled() {
		return ""
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	nonce, mac, ok := strings.Cut(c.Value, ".")
	if !ok || nonce == "" || !hmac.Equal([]byte(mac), []byte(a.mac("session", nonce))) {
		return ""
	}
	return nonce
}

// csrf is the CSRF token of a session: forms carry it, and an action from a
// session must.
func (a auth) csrf(nonce string) string { return a.mac("csrf", nonce) }

// bearer reports whether r carries the token as "Authorization: Bearer".
// The scheme is case-insensitive (RFC 9110, section 11.1), so "bearer" and
// "BEARER" are Bearer too; spaces may follow it.
func (a auth) bearer(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && a.checkToken(strings.TrimLeft(tok, " "))
}

// refusal says why r may not act, with the status to answer; "" when it may.
func (a auth) refusal(r *http.Request) (int, string) {
	if !a.enabled() {
		return http.StatusForbidden, "the console is read-only: start it with a token (batchq console --token-env NAME) to act"
	}
	if a.bearer(r) {
		return 0, ""
	}
	if !sameOrigin(r) {
		return http.StatusForbidden, "refused: the request comes from another site"
	}
	nonce := a.session(r)
	if nonce == "" {
		return http.StatusUnauthorized, "sign in with the console's token to act"
	}
	if got := r.PostFormValue("csrf"); !hmac.Equal([]byte(got), []byte(a.csrf(nonce))) {
		return http.StatusForbidden, "refused: the form's CSRF token is missing or wrong; reload the page and try again"
	}
	return 0, ""
}

// sameOrigin reports whether r's Origin, when a browser sent one, is the
// host it was sent to.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}
