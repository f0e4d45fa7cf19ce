// siding-consumer: answer Kafka deliveries pushed by siding, over gRPC or HTTP webhooks.

export type { Delivery, Header } from "./delivery.js";
export { Reply, type Output, type RetryOptions, type Verdict, ack, backoff, dead, DeadLetter, retry } from "./reply.js";
export { type Call, ConsumerServer, type DeliveryInfo, type Handler, type Logger, type ServerOptions, type ServerStats, serve } from "./server.js";
export {
  type JoinOptions,
  Registration,
  RegistrationError,
  type RegistrationEvent,
  type RegistrationEventKind,
  type RegistrationOptions,
  type Transport,
} from "./registration.js";
export { WebhookServer, type WebhookOptions, type WebhookServerOptions, type WebhookStats, serveWebhook, webhookListener } from "./webhook.js";
export {
  DEFAULT_TOLERANCE_SECONDS,
  type HeaderMap,
  type VerificationProblem,
  type VerifyOptions,
  WebhookVerificationError,
  signWebhook,
  verifyWebhook,
} from "./signing.js";
export { BATCH_CONTENT_TYPE } from "./envelope.js";
export { BodyEncodingError, decodeBody } from "./encoding.js";
export { CONSUMER_PROTO, CONSUMER_SERVICE } from "./proto.js";
