// Type-checked (never run) by `npm run build`: the shipped .d.ts serve a TypeScript consumer.
import {
  ConsumerServer,
  type Delivery,
  type Handler,
  type Reply,
  WebhookServer,
  WebhookVerificationError,
  ack,
  backoff,
  dead,
  retry,
  verifyWebhook,
} from "siding-consumer";

const handler: Handler = async (d: Delivery, { call }): Promise<Reply> => {
  if (call === "webhook-batch") return retry();
  const offset: bigint = d.offset;
  const key: Buffer | null = d.key;
  if (d.value === null) return ack();
  if (d.attempt > 3) return dead(`gave up at ${offset} (${key?.length ?? 0})`);
  if (d.lane > 0) return backoff({ afterSeconds: 1 });
  return d.headers.some((h) => h.key === "x") ? retry({ afterSeconds: 5, reason: "later" }) : ack([{ topic: "out", value: d.value }]);
};

export async function main(): Promise<void> {
  const server = await new ConsumerServer(handler, { listen: "127.0.0.1:0", graceSeconds: 5 }).start();
  const web = await new WebhookServer(handler, { secret: "whsec_abc=", listen: "127.0.0.1:0" }).start();
  const target: string = server.target;
  const url: string = web.url;
  const { stream, batchDeliveries } = server.stats();
  try {
    verifyWebhook("s", { "webhook-id": "a" }, new Uint8Array());
  } catch (error) {
    if (error instanceof WebhookVerificationError) console.log(error.problem satisfies string, target, url, stream + batchDeliveries);
  }
  await Promise.all([server.stop(), web.stop(1)]);
}
