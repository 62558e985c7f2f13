package console_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/batchq/batchq/console"
	"github.com/batchq/batchq/queue"
)

// An application serves the console under /batchq/ on its own server,
// read-only unless BATCHQ_CONSOLE_TOKEN is set (docs/console.md). It is
// compiled, not run: it would serve until stopped.
func ExampleHandler() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	client, err := queue.NewClient(pool, queue.Config{})
	if err != nil {
		log.Fatal(err)
	}
	h, err := console.Handler(client, &console.Options{
		Token:    os.Getenv("BATCHQ_CONSOLE_TOKEN"), // "": read-only
		BasePath: "/batchq",
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/batchq/", http.StripPrefix("/batchq", h))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
