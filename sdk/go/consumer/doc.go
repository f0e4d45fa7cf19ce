// Package consumer answers the Kafka records that siding pushes to a consumer service, over
// gRPC (unary, stream and batches, with gRPC health checking) or HTTP webhooks (signed the
// Standard Webhooks way, one delivery per request or a CloudEvents batch).
//
// A handler answers each delivery with Ack, Retry, Dead or Backoff:
//
//	h := consumer.HandlerFunc(func(ctx context.Context, d consumer.Delivery) consumer.Result {
//		if !json.Valid(d.Value) {
//			return consumer.Dead("not JSON") // straight to the dead-letter topic
//		}
//		if err := charge(ctx, d.ID, d.Value); err != nil { // deduplicate on d.ID
//			return consumer.Retry(30*time.Second, err.Error())
//		}
//		return consumer.Ack()
//	})
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	log.Fatal(consumer.ListenAndServe(ctx, ":50051", h)) // returns nil after a graceful stop
//
// The contract is proto/siding/v1/consumer.proto; its generated Go code is the sidingv1 package
// beside this one.
package consumer
