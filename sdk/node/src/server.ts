// Serve a handler to siding over gRPC: Deliver, DeliverStream, DeliverBatches and health
// checking, with a graceful stop (take no more deliveries, finish those in flight).

import { readFileSync } from "node:fs";
import * as grpc from "@grpc/grpc-js";
import { type Delivery, type DeliveryMessage, deliveryFromMessage } from "./delivery.js";
import { HealthService } from "./health.js";
import { CONSUMER_SERVICE, services } from "./proto.js";
import { type JoinOptions, type Registration, joinOrStop, serverRegistration } from "./registration.js";
import { type Output, type Reply, replyForReturn, replyForThrow } from "./reply.js";
import { untilSignalled } from "./signals.js";

/** How a delivery arrived: the gRPC call, or a webhook request of one delivery or a batch. */
export type Call = "Deliver" | "DeliverStream" | "DeliverBatches" | "webhook" | "webhook-batch";

/** What a handler is told beside the delivery (for metrics and logs). */
export interface DeliveryInfo {
  readonly call: Call;
}

/** Answers one delivery; may be async. A throw is a RETRY (DeadLetter: DEAD). */
export type Handler = (delivery: Delivery, info: DeliveryInfo) => Reply | Promise<Reply>;

const INFO: Readonly<Record<Call, DeliveryInfo>> = Object.freeze({
  Deliver: Object.freeze({ call: "Deliver" }),
  DeliverStream: Object.freeze({ call: "DeliverStream" }),
  DeliverBatches: Object.freeze({ call: "DeliverBatches" }),
  webhook: Object.freeze({ call: "webhook" }),
  "webhook-batch": Object.freeze({ call: "webhook-batch" }),
});

export interface Logger {
  info(message: string): void;
  warn(message: string): void;
}

export interface ServerOptions {
  /** host:port; port 0 picks a free one. Default "127.0.0.1:0" (serve(): "0.0.0.0:50051"). */
  readonly listen?: string;
  /** How long stop() lets deliveries in flight finish before cancelling them. Default 10. */
  readonly graceSeconds?: number;
  /** PEM files; TLS is on when given. */
  readonly tls?: { readonly certFile: string; readonly keyFile: string };
  /** Extra gRPC server options, over this SDK's defaults. */
  readonly grpcOptions?: grpc.ServerOptions;
  /** Where handler errors and stop messages go. Default: console. */
  readonly logger?: Logger;
  /** Join this siding route once the server listens; leave it first thing in stop(). */
  readonly join?: JoinOptions;
}

const DEFAULT_GRPC_OPTIONS: grpc.ServerOptions = {
  // As large as siding's channels send; gRPC's 4 MiB default would refuse big records.
  "grpc.max_receive_message_length": 64 * 1024 * 1024,
};

interface ResultMessage {
  deliveryId: string;
  verdict: "VERDICT_ACK" | "VERDICT_RETRY" | "VERDICT_DEAD";
  retryAfterSeconds?: number;
  reason: string;
  outputs: OutputMessage[];
}

interface OutputMessage {
  topic: string;
  key?: Buffer;
  value?: Buffer;
  headers: { key: string; value: Buffer }[];
}

function bytes(value: Uint8Array | string | null | undefined): Buffer | undefined {
  if (value === null || value === undefined) return undefined;
  return typeof value === "string" ? Buffer.from(value, "utf8") : Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}

function outputMessage(output: Output): OutputMessage {
  const message: OutputMessage = {
    topic: output.topic,
    headers: (output.headers ?? []).map((h) => ({ key: h.key, value: bytes(h.value) ?? Buffer.alloc(0) })),
  };
  const key = bytes(output.key);
  const value = bytes(output.value);
  if (key !== undefined) message.key = key;
  if (value !== undefined) message.value = value;
  return message;
}

/** A Reply as a siding.v1.Result. A back-off becomes a RETRY with its delay: a Result cannot say it. */
export function resultMessage(deliveryId: string, reply: Reply): ResultMessage {
  const result: ResultMessage = {
    deliveryId,
    verdict: reply.verdict === "ack" ? "VERDICT_ACK" : reply.verdict === "dead" ? "VERDICT_DEAD" : "VERDICT_RETRY",
    reason: reply.reason,
    outputs: reply.outputs.map(outputMessage),
  };
  if (reply.afterSeconds !== undefined) result.retryAfterSeconds = reply.afterSeconds;
  return result;
}

/** Deliveries taken so far, by RPC: how siding is sending (a batched route uses DeliverBatches). */
export interface ServerStats {
  /** Deliver calls. */
  unary: number;
  /** Deliveries read on DeliverStream. */
  stream: number;
  /** DeliveryBatch frames read on DeliverBatches, and the deliveries they carried. */
  batches: number;
  batchDeliveries: number;
}

type Answer = (message: DeliveryMessage) => Promise<ResultMessage>;
type Duplex = grpc.ServerDuplexStream<unknown, unknown>;

/**
 * One DeliverStream or DeliverBatches call: each delivery read is handled at once; results go back
 * as they finish (on DeliverBatches, those finished in the same turn of the event loop share a
 * frame). Ends when the client stops sending (or drain() is called) and every delivery read so far
 * has been answered.
 */
class CallSession {
  private inFlight = 0;
  private reading = true;
  private closed = false;
  private pending: ResultMessage[] = [];
  private flushing = false;

  constructor(
    private readonly call: Duplex,
    private readonly answer: Answer,
    private readonly batched: boolean,
    private readonly onClose: (session: CallSession) => void,
    stats: ServerStats,
  ) {
    call.on("data", (message: unknown) => {
      const deliveries = batched ? (message as { deliveries: DeliveryMessage[] }).deliveries : [message as DeliveryMessage];
      if (batched) {
        stats.batches += 1;
        stats.batchDeliveries += deliveries.length;
      } else {
        stats.stream += 1;
      }
      for (const delivery of deliveries) this.take(delivery);
    });
    call.on("end", () => {
      this.reading = false;
      this.endIfDone();
    });
    call.on("cancelled", () => this.close());
    call.on("error", () => this.close());
  }

  /** Read no more deliveries; finish the ones already read, then end the call. */
  drain(): void {
    this.call.pause();
    this.reading = false;
    this.endIfDone();
  }

  private take(message: DeliveryMessage): void {
    if (!this.reading) return; // read before drain() paused the call: never answered, siding sends it again
    this.inFlight += 1;
    void this.answer(message).then((result) => {
      this.inFlight -= 1;
      if (this.closed) return;
      if (!this.batched) {
        this.call.write(result);
      } else {
        this.pending.push(result);
        if (!this.flushing) {
          this.flushing = true;
          setImmediate(() => this.flush());
        }
      }
      this.endIfDone();
    });
  }

  private flush(): void {
    this.flushing = false;
    if (this.closed || this.pending.length === 0) return;
    const results = this.pending;
    this.pending = [];
    this.call.write({ results });
  }

  private endIfDone(): void {
    if (this.closed || this.reading || this.inFlight > 0) return;
    this.flush();
    this.closed = true;
    this.call.end();
    this.onClose(this);
  }

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose(this);
  }
}

/**
 * A gRPC server for one handler: `await server.start()`, then `await server.stop()`.
 * Health checking answers SERVING (for "" and "siding.v1.Consumer") until stop() begins.
 */
export class ConsumerServer {
  readonly listen: string;
  readonly graceSeconds: number;
  private readonly health = new HealthService();
  private readonly sessions = new Set<CallSession>();
  private readonly logger: Logger;
  private readonly counts: ServerStats = { unary: 0, stream: 0, batches: 0, batchDeliveries: 0 };
  private server: grpc.Server | undefined;
  private boundPort = 0;
  private draining = false;
  /** The route joined with the `join` option, once started. */
  registration: Registration | undefined;

  constructor(
    private readonly handler: Handler,
    private readonly options: ServerOptions = {},
  ) {
    if (typeof handler !== "function") throw new TypeError("ConsumerServer: handler must be a function");
    this.listen = options.listen ?? "127.0.0.1:0";
    this.graceSeconds = options.graceSeconds ?? 10;
    this.logger = options.logger ?? console;
  }

  /** The port bound (useful with port 0). */
  get port(): number {
    if (this.boundPort === 0) throw new Error("the consumer server is not started");
    return this.boundPort;
  }

  /** Where a client on this machine reaches the server: host:port. */
  get target(): string {
    const host = this.listen.slice(0, this.listen.lastIndexOf(":"));
    const local = host === "" || host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host;
    return `${local}:${this.port}`;
  }

  /** Deliveries taken so far, by RPC. */
  stats(): Readonly<ServerStats> {
    return { ...this.counts };
  }

  async start(): Promise<this> {
    if (this.server !== undefined) throw new Error("the consumer server is already started");
    const server = new grpc.Server({ ...DEFAULT_GRPC_OPTIONS, ...this.options.grpcOptions });
    const { consumer, health } = services();
    server.addService(consumer, {
      Deliver: (call: grpc.ServerUnaryCall<DeliveryMessage, ResultMessage>, callback: grpc.sendUnaryData<ResultMessage>) => {
        this.counts.unary += 1;
        void this.reply(call.request, "Deliver").then(([id, reply]) => {
          if (reply.verdict === "backoff") {
            // siding backs off and redelivers in place, without spending an attempt.
            callback({ code: grpc.status.RESOURCE_EXHAUSTED, details: reply.reason || "consumer backs off" });
          } else {
            callback(null, resultMessage(id, reply));
          }
        });
      },
      DeliverStream: (call: Duplex) => this.session(call, false),
      DeliverBatches: (call: Duplex) => this.session(call, true),
    });
    server.addService(health, this.health.implementation());
    this.health.set("", "SERVING");
    this.health.set(CONSUMER_SERVICE, "SERVING");
    this.boundPort = await new Promise<number>((resolve, reject) => {
      server.bindAsync(this.listen, this.credentials(), (error, port) => {
        if (error) reject(new Error(`cannot listen on ${this.listen}: ${error.message}`));
        else resolve(port);
      });
    });
    this.server = server;
    const transport = this.options.tls ? "grpcs" : "grpc";
    this.registration = serverRegistration(this.options.join, { listen: this.listen, port: this.boundPort, transport, logger: this.logger });
    await joinOrStop(this.registration, () => this.stop(0));
    return this;
  }

  /** Stop taking deliveries; give those in flight `graceSeconds` to finish, then cancel them. */
  async stop(graceSeconds: number = this.graceSeconds): Promise<void> {
    const server = this.server;
    if (server === undefined) return;
    this.server = undefined;
    await this.registration?.stop(); // siding sends nothing new once the leave is answered
    this.health.shutdown();
    this.draining = true;
    for (const session of [...this.sessions]) session.drain();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, graceSeconds * 1000);
      server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private session(call: Duplex, batched: boolean): void {
    const kind: Call = batched ? "DeliverBatches" : "DeliverStream";
    const session = new CallSession(call, (m) => this.answer(m, kind), batched, (s) => this.sessions.delete(s), this.counts);
    this.sessions.add(session);
    if (this.draining) session.drain();
  }

  private async answer(message: DeliveryMessage, kind: Call): Promise<ResultMessage> {
    const [id, reply] = await this.reply(message, kind);
    return resultMessage(id, reply);
  }

  private async reply(message: DeliveryMessage, kind: Call): Promise<[string, Reply]> {
    const delivery = deliveryFromMessage(message);
    return [delivery.id, await runHandler(this.handler, delivery, kind, this.logger)];
  }

  private credentials(): grpc.ServerCredentials {
    const tls = this.options.tls;
    if (tls === undefined) return grpc.ServerCredentials.createInsecure();
    return grpc.ServerCredentials.createSsl(null, [
      { cert_chain: readFileSync(tls.certFile), private_key: readFileSync(tls.keyFile) },
    ]);
  }
}

/** The handler's Reply for one delivery; never throws. */
export async function runHandler(handler: Handler, delivery: Delivery, call: Call, logger: Logger): Promise<Reply> {
  try {
    return replyForReturn(await handler(delivery, INFO[call]));
  } catch (error) {
    const reply = replyForThrow(error);
    if (reply.verdict === "dead") logger.info(`siding-consumer: dead letter ${delivery.id}: ${reply.reason}`);
    else logger.warn(`siding-consumer: handler threw for ${delivery.id}: ${reply.reason}`);
    return reply;
  }
}

/**
 * Serve `handler` over gRPC until SIGTERM or SIGINT, then stop gracefully. Resolves once started,
 * with the server; `server.stopped` resolves after the stop.
 */
export async function serve(handler: Handler, options: ServerOptions = {}): Promise<ConsumerServer & { stopped: Promise<void> }> {
  const server = new ConsumerServer(handler, { listen: "0.0.0.0:50051", ...options });
  await server.start();
  const logger = options.logger ?? console;
  logger.info(`siding consumer listening on ${server.target} (gRPC)`);
  const stopped = untilSignalled().then(async (signal) => {
    logger.info(`${signal}: finishing deliveries in flight (up to ${server.graceSeconds}s)`);
    await server.stop();
  });
  return Object.assign(server, { stopped });
}
