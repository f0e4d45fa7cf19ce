// Type-checked (never run) by `npm run build`: the shipped .d.ts serve a TypeScript consumer.
import {
  ConsumerServer,
  type Delivery,
  type Handler,
  Registration,
  RegistrationError,
  type RegistrationEvent,
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
  const events: RegistrationEvent[] = [];
  const join = { controlUrl: "http://siding:9464", route: "orders", token: "t", onEvent: (e: RegistrationEvent) => events.push(e) };
  const joined = await new ConsumerServer(handler, { listen: "0.0.0.0:50051", join }).start();
  const lease = await new Registration({ ...join, address: "10.0.0.5:8080/hook", transport: "http", capacity: 200 }).start();
  try {
    const id: string | null = lease.consumer ?? joined.registration?.consumer ?? null;
    console.log(id, events.map((e) => `${e.kind} ${e.status ?? ""}`));
  } catch (error) {
    if (error instanceof RegistrationError) console.log(error.status satisfies number);
  }
  await Promise.all([lease.stop({ leave: false }), joined.stop()]);
}
