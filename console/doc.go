// Package console is batchq's web console: an http.Handler that shows, for
// every queue, whether the fair order holds (each tenant's share of the
// tokens against its weight, over time), what waits and for how long, and
// the shared quota; and lets an operator pause and resume a queue, change a
// tenant's weight or bound, cancel a tenant's queued jobs and retry a
// discarded job. `batchq console` serves it; a Go application mounts
// Handler on its own mux.
//
// # Pages
//
// The overview lists every queue (backlog in jobs and tokens, running,
// scheduled, paused, outcomes of the last hour) and every quota key
// (remaining, reserve, paused until, 429s of the last hour). A queue's page
// has a row per tenant (the top ones by queued tokens, the rest summed as
// "others") and a chart of each tenant's share of the tokens over a chosen
// window, drawn as SVG on the server by the code that draws the demo's chart
// (internal/sharechart). A tenant's page shows its backlog, settings and
// recent outcomes with their errors; a job's page its whole record. Each
// page refreshes its numbers every Options.Refresh by fetching its own live
// part again (a few lines of embedded JavaScript, no build step).
//
// # Who may do what
//
// Reading needs nothing: bind the console to loopback, or put it behind
// what guards the rest of the application. Actions need Options.Token:
// without one the console is read-only; with one, a browser signs in with
// it (a session cookie, HttpOnly and SameSite=Strict) and every action
// carries a CSRF token bound to that session; scripts may send the token as
// "Authorization: Bearer …" instead. The database decides the rest: the
// console's pages read only what batchq's app role may read, show payloads
// and results only when its role may read them, and offer only the actions
// its role may take; one it may not take (the app role pauses nothing) is
// refused with the database's reason.
package console
