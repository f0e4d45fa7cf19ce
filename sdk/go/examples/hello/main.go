// The README's example: a consumer service in a dozen lines.
package main

import (
	"context"
	"encoding/json"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/siding-dev/siding/sdk/go/consumer"
)

func main() {
	handle := consumer.HandlerFunc(func(ctx context.Context, d consumer.Delivery) consumer.Result {
		if !json.Valid(d.Value) {
			return consumer.Dead("not JSON") // straight to the dead-letter topic, never retried
		}
		if err := charge(ctx, d.ID, d.Value); err != nil { // deduplicate on d.ID
			return consumer.Retry(30*time.Second, err.Error())
		}
		return consumer.Ack()
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Fatal(consumer.ListenAndServe(ctx, ":50051", handle)) // nil after a graceful stop
}

func charge(context.Context, string, []byte) error { return nil }
