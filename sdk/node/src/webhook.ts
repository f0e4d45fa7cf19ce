// Serve a handler to siding over HTTP webhooks (node:http): verify the Standard Webhooks
// signature, read one delivery or a batch, answer each with the handler's Reply.

import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { Delivery } from "./delivery.js";
import { BodyEncodingError, decodeBody, withoutEncoding } from "./encoding.js";
import {
  EnvelopeError,
  type HttpAnswer,
  READS_BATCHES,
  RESULT_STREAM_TYPE,
  acceptsResultStream,
  batchAnswer,
  deliveriesFromBatch,
  deliveryFromRequest,
  isBatch,
  resultLine,
  singleAnswer,
} from "./envelope.js";
import { type JoinOptions, type Registration, joinOrStop, serverRegistration } from "./registration.js";
import { type Handler, type Logger, runHandler } from "./server.js";
import { DEFAULT_TOLERANCE_SECONDS, WebhookVerificationError, secretKey, verifyWebhook } from "./signing.js";
import { untilSignalled } from "./signals.js";

export interface WebhookOptions {
  /** The route's webhook_secret; null turns verification off (only for a route without one). */
  readonly secret: string | null;
  /** How far webhook-timestamp may be from this machine's clock. Default 300. */
  readonly toleranceSeconds?: number;
  /** Larger request bodies are answered 413 (which siding dead-letters). Default 16 MiB. */
  readonly maxBodyBytes?: number;
  /** Where handler errors go. Default: console. */
  readonly logger?: Logger;
}

export interface WebhookServerOptions extends WebhookOptions {
  /** host:port; port 0 picks a free one. Default "127.0.0.1:0" (serveWebhook(): "0.0.0.0:8080"). */
  readonly listen?: string;
  /** How long stop() lets requests in flight finish before closing their connections. Default 10. */
  readonly graceSeconds?: number;
  /** Join this siding route once the server listens (transport "http"); leave it first thing in
   * stop(). */
  readonly join?: JoinOptions;
}

const DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;
const DELIVERY_METHODS = new Set(["POST", "PUT", "PATCH"]);
type Listener = (request: IncomingMessage, response: ServerResponse) => void;

/** Requests answered so far: one-delivery requests, batch requests and the deliveries in them. */
export interface WebhookStats {
  single: number;
  batches: number;
  batchDeliveries: number;
}

class TooLarge extends Error {}

function readBody(request: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    request.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        request.removeAllListeners("data");
        request.resume();
        reject(new TooLarge());
        return;
      }
      chunks.push(chunk);
    });
    request.on("end", () => resolve(Buffer.concat(chunks)));
    request.on("error", reject);
  });
}

function send(response: ServerResponse, answer: HttpAnswer): void {
  const body = Buffer.from(answer.body, "utf8");
  response.writeHead(answer.status, { ...answer.headers, "content-length": String(body.length) });
  response.end(body);
}

/** A batch answered as it finishes: each line resolves when its delivery's handler is done. */
interface ResultStream {
  readonly lines: readonly Promise<string>[];
}

/** Write each line as it resolves, in finishing order, and end once every one is written: a
 * slow delivery holds back no other's answer (siding settles each as its line comes). */
async function stream(response: ServerResponse, lines: readonly Promise<string>[]): Promise<void> {
  response.writeHead(200, { "content-type": RESULT_STREAM_TYPE, ...READS_BATCHES });
  response.flushHeaders();
  const gone = (): boolean => response.destroyed || response.writableEnded;
  await Promise.all(lines.map((line) => line.then((text) => void (gone() || response.write(text)))));
  if (!gone()) response.end();
}

/** An answer of the handler: it says this server reads batches. */
function said(answer: HttpAnswer): HttpAnswer {
  return { ...answer, headers: { ...answer.headers, ...READS_BATCHES } };
}

function plain(status: number, text: string): HttpAnswer {
  return { status, headers: { "content-type": "text/plain; charset=utf-8" }, body: text };
}

/**
 * A node:http request listener for `handler`: use it with `http.createServer(listener)` or any
 * framework that hands over the raw request. It answers 401 to a request whose signature does not
 * verify (without calling the handler), 413 to a body over `maxBodyBytes`, 400 to a request that is
 * not a siding delivery, 204 to OPTIONS (siding's liveness probe); otherwise the handler's replies,
 * saying `siding-batch: v1` (a batch whose request accepts application/x-ndjson: one result line
 * per delivery, written as its handler finishes).
 */
export function webhookListener(handler: Handler, options: WebhookOptions): Listener & { stats(): Readonly<WebhookStats> } {
  if (typeof handler !== "function") throw new TypeError("webhookListener: handler must be a function");
  if (options.secret !== null) secretKey(options.secret); // fail at startup, not on the first request
  const limit = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  const logger = options.logger ?? console;
  const counts: WebhookStats = { single: 0, batches: 0, batchDeliveries: 0 };

  async function answer(request: IncomingMessage): Promise<HttpAnswer | ResultStream> {
    if (request.method === "OPTIONS") return { status: 204, headers: {}, body: "" };
    // A route may send with POST, PUT or PATCH ([route.http] method), to any path.
    if (!DELIVERY_METHODS.has(request.method ?? "")) {
      return plain(405, "siding deliveries are POSTed, PUT or PATCHed");
    }
    let body: Buffer;
    try {
      body = await readBody(request, limit);
    } catch (error) {
      if (error instanceof TooLarge) return plain(413, `request body over ${limit} bytes`);
      throw error;
    }
    try {
      body = decodeBody(request.headers, body, limit);
    } catch (error) {
      if (error instanceof BodyEncodingError) return plain(error.status, error.message);
      throw error;
    }
    if (options.secret !== null) {
      try {
        verifyWebhook(options.secret, request.headers, body, { toleranceSeconds: tolerance });
      } catch (error) {
        if (error instanceof WebhookVerificationError) return plain(401, `webhook verification failed: ${error.message}`);
        throw error;
      }
    }
    try {
      if (isBatch(request.headers["content-type"])) {
        const deliveries = deliveriesFromBatch(body);
        counts.batches += 1;
        counts.batchDeliveries += deliveries.length;
        const replies = deliveries.map((d: Delivery) => runHandler(handler, d, "webhook-batch", logger));
        if (acceptsResultStream(request.headers.accept)) {
          return { lines: replies.map((reply, n) => reply.then((r) => resultLine((deliveries[n] as Delivery).id, r))) };
        }
        return said(
          batchAnswer(
            deliveries.map((d) => d.id),
            await Promise.all(replies),
          ),
        );
      }
      const delivery = deliveryFromRequest(withoutEncoding(request.rawHeaders), body);
      counts.single += 1;
      return said(singleAnswer(await runHandler(handler, delivery, "webhook", logger)));
    } catch (error) {
      if (error instanceof EnvelopeError) return plain(400, error.message);
      throw error;
    }
  }

  const listener = (request: IncomingMessage, response: ServerResponse): void => {
    answer(request)
      .then((result) => ("lines" in result ? stream(response, result.lines) : send(response, result)))
      .catch((error: unknown) => {
        logger.warn(`siding-consumer: webhook request failed: ${String(error)}`);
        if (!response.headersSent) send(response, plain(500, "the consumer failed to read the request"));
        else response.destroy();
      });
  };
  return Object.assign(listener, { stats: (): Readonly<WebhookStats> => ({ ...counts }) });
}

/** An HTTP server for one handler: `await server.start()`, then `await server.stop()`. */
export class WebhookServer {
  readonly listen: string;
  readonly graceSeconds: number;
  private readonly listener: Listener & { stats(): Readonly<WebhookStats> };
  private server: Server | undefined;
  private boundPort = 0;
  private inFlight = 0;
  private idle: (() => void) | undefined;
  private readonly options: WebhookServerOptions;
  /** The route joined with the `join` option, once started. */
  registration: Registration | undefined;

  constructor(handler: Handler, options: WebhookServerOptions) {
    this.options = options;
    this.listener = webhookListener(handler, options);
    this.listen = options.listen ?? "127.0.0.1:0";
    this.graceSeconds = options.graceSeconds ?? 10;
  }

  /** Requests answered so far. */
  stats(): Readonly<WebhookStats> {
    return this.listener.stats();
  }

  get port(): number {
    if (this.boundPort === 0) throw new Error("the webhook server is not started");
    return this.boundPort;
  }

  /** The URL a client on this machine posts to. */
  get url(): string {
    const host = this.listen.slice(0, this.listen.lastIndexOf(":"));
    const local = host === "" || host === "0.0.0.0" || host === "[::]" ? "127.0.0.1" : host;
    return `http://${local}:${this.port}/`;
  }

  async start(): Promise<this> {
    if (this.server !== undefined) throw new Error("the webhook server is already started");
    const server = createServer((request, response) => {
      this.inFlight += 1;
      response.on("close", () => {
        this.inFlight -= 1;
        if (this.inFlight === 0) this.idle?.();
      });
      this.listener(request, response);
    });
    const colon = this.listen.lastIndexOf(":");
    const host = this.listen.slice(0, colon).replace(/^\[|\]$/g, "");
    const port = Number(this.listen.slice(colon + 1));
    await new Promise<void>((resolve, reject) => {
      server.once("error", (error) => reject(new Error(`cannot listen on ${this.listen}: ${error.message}`)));
      server.listen(port, host || undefined, () => resolve());
    });
    const address = server.address();
    this.boundPort = typeof address === "object" && address !== null ? address.port : port;
    this.server = server;
    const logger = this.options.logger ?? console;
    this.registration = serverRegistration(this.options.join, { listen: this.listen, port: this.boundPort, transport: "http", logger });
    await joinOrStop(this.registration, () => this.stop(0));
    return this;
  }

  /** Take no more requests; give those in flight `graceSeconds` to be answered, then close. */
  async stop(graceSeconds: number = this.graceSeconds): Promise<void> {
    const server = this.server;
    if (server === undefined) return;
    this.server = undefined;
    await this.registration?.stop(); // siding sends nothing new once the leave is answered
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, graceSeconds * 1000);
      this.idle = () => {
        clearTimeout(timer);
        resolve();
      };
      if (this.inFlight === 0) this.idle();
    });
    server.closeAllConnections();
    await closed;
  }
}

/** Serve `handler` over HTTP until SIGTERM or SIGINT, then stop gracefully. */
export async function serveWebhook(
  handler: Handler,
  options: WebhookServerOptions,
): Promise<WebhookServer & { stopped: Promise<void> }> {
  const server = new WebhookServer(handler, { listen: "0.0.0.0:8080", ...options });
  await server.start();
  const logger = options.logger ?? console;
  logger.info(`siding consumer listening on ${server.url} (HTTP webhooks)`);
  const stopped = untilSignalled().then(async (signal) => {
    logger.info(`${signal}: finishing requests in flight (up to ${server.graceSeconds}s)`);
    await server.stop();
  });
  return Object.assign(server, { stopped });
}
