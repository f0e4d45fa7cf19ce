// Join a siding route with the address this service listens on, keep the lease, leave on stop
// (docs/registration.md, "For SDK writers"). Node's own fetch; one timer, unref'd.

import { hostname } from "node:os";
import type { Logger } from "./server.js";

export type Transport = "grpc" | "grpcs" | "http" | "https";

/** joined; lapsed (a renewal answered 404: joining again); unreachable (no answer or a 5xx:
 * trying again later); refused (any other 4xx); left. */
export type RegistrationEventKind = "joined" | "lapsed" | "unreachable" | "refused" | "left";

export interface RegistrationEvent {
  readonly kind: RegistrationEventKind;
  readonly route: string;
  readonly consumer: string | null;
  /** siding's HTTP status, when it answered. */
  readonly status: number | null;
  /** siding's reason, or the connection error. Never the token. */
  readonly detail: string;
}

/** The `join` option of ConsumerServer and WebhookServer. */
export interface JoinOptions {
  /** siding's control API, e.g. "http://siding:9464". */
  readonly controlUrl: string;
  readonly route: string;
  /** The route's registration token (or the admin token). */
  readonly token: string;
  /** How siding reaches this service: "host:port" ("host:port/path" over HTTP) or a whole
   * endpoint URL. Default: the listen host (this machine's host name when it listens on every
   * interface) and the bound port. */
  readonly address?: string;
  /** 1 to 100,000; siding's default is 100. */
  readonly capacity?: number;
  readonly onEvent?: (event: RegistrationEvent) => void;
}

export interface RegistrationOptions extends JoinOptions {
  readonly address: string;
  readonly transport?: Transport;
  /** Per call. Default 10. */
  readonly timeoutSeconds?: number;
  /** Default: console. */
  readonly logger?: Logger;
}

/** siding refused a join: `status` is its HTTP status, the message its reason. */
export class RegistrationError extends Error {
  constructor(
    readonly route: string,
    readonly status: number,
    reason: string,
  ) {
    super(`joining route ${route} was refused (${status}): ${reason}`);
    this.name = "RegistrationError";
  }
}

class Unreachable extends Error {
  constructor(
    message: string,
    readonly status: number | null,
  ) {
    super(message);
  }
}

const FIRST_RETRY_SECONDS = 0.5;
const NO_LEASE_EVERY_SECONDS = 5;

export function consumersUrl(controlUrl: string, route: string): string {
  return `${controlUrl.replace(/\/+$/, "")}/routes/${encodeURIComponent(route)}/consumers`;
}

export function joinBody(address: string, transport?: Transport, capacity?: number): Record<string, unknown> {
  const body: Record<string, unknown> = { address };
  if (transport !== undefined) body.transport = transport;
  if (capacity !== undefined) body.capacity = capacity;
  return body;
}

/** A lease is renewed three times per lease. */
export function renewEverySeconds(leaseSeconds: number): number {
  return leaseSeconds / 3;
}

/** The wait after `failures` failed calls in a row: 0.5 s, doubling, at most `everySeconds`. */
export function retryAfterSeconds(failures: number, everySeconds: number): number {
  return Math.min(everySeconds, FIRST_RETRY_SECONDS * 2 ** Math.max(0, failures - 1));
}

/** host:port that siding should dial for a server listening on `listen`. */
export function advertised(listen: string, port: number): string {
  let host = listen.slice(0, listen.lastIndexOf(":"));
  if (host === "" || host === "0.0.0.0" || host === "[::]" || host === "::") host = hostname();
  return `${host}:${port}`;
}

/** Where a server that joins listens and how siding reaches it. */
export interface ListeningServer {
  readonly listen: string;
  /** The port bound (the listen port, or the one picked for port 0). */
  readonly port: number;
  readonly transport: Transport;
  readonly logger: Logger;
}

/**
 * The `join` option of ConsumerServer or WebhookServer, for the server that now listens: its
 * registration (undefined without the option). The address defaults to `advertised`.
 */
export function serverRegistration(join: JoinOptions | undefined, server: ListeningServer): Registration | undefined {
  if (join === undefined) return undefined;
  const address = join.address ?? advertised(server.listen, server.port);
  return new Registration({ ...join, address, transport: server.transport, logger: server.logger });
}

/**
 * Join with a server's registration once the server listens; when siding refuses, stop the
 * server (`stopServer`) and throw. The server's stop() leaves first, with `registration.stop()`.
 */
export async function joinOrStop(registration: Registration | undefined, stopServer: () => Promise<void>): Promise<void> {
  try {
    await registration?.start();
  } catch (error) {
    await stopServer();
    throw error;
  }
}

/**
 * One instance's registration on one route: `await start()` joins and renews in the background
 * every lease/3; a renewal answered 404 joins again; a connection error or a 5xx is retried
 * after a back-off (0.5 s doubling, at most the renewal interval) without stopping the service.
 * Only the first join throws (RegistrationError) on a refusal. `await stop()` leaves.
 */
export class Registration {
  readonly route: string;
  consumer: string | null = null;
  leaseSeconds: number | null = null;
  private readonly url: string;
  private readonly body: Record<string, unknown>;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly onEvent: ((event: RegistrationEvent) => void) | undefined;
  private readonly logger: Logger;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private failures = 0;
  private started = false;
  private stopped = false;

  constructor(options: RegistrationOptions) {
    if (!options.token) throw new Error(`joining route ${options.route} needs its registration token`);
    this.route = options.route;
    this.url = consumersUrl(options.controlUrl, options.route);
    this.body = joinBody(options.address, options.transport, options.capacity);
    this.headers = { authorization: `Bearer ${options.token}`, "content-type": "application/json" };
    this.timeoutMs = (options.timeoutSeconds ?? 10) * 1000;
    this.onEvent = options.onEvent;
    this.logger = options.logger ?? console;
    // Keep the token out of util.inspect and JSON.stringify of this object.
    Object.defineProperty(this, "headers", { enumerable: false });
  }

  get everySeconds(): number {
    return this.leaseSeconds === null ? NO_LEASE_EVERY_SECONDS : renewEverySeconds(this.leaseSeconds);
  }

  /** Join now. Throws RegistrationError when siding refuses; when it cannot be reached, the
   * join is retried in the background and start() returns. */
  async start(): Promise<this> {
    if (this.started) throw new Error("the registration is already started");
    this.started = true;
    try {
      await this.join();
    } catch (error) {
      if (!(error instanceof Unreachable)) throw error;
      this.failures = 1;
      this.event("unreachable", error.status, error.message);
    }
    this.schedule();
    return this;
  }

  /** Stop renewing and leave the route (`leave: false`: let the lease lapse instead). */
  async stop({ leave = true }: { leave?: boolean } = {}): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
    const consumer = this.consumer;
    this.consumer = null;
    if (!leave || consumer === null) return;
    try {
      const [status, answer] = await this.call("DELETE", `${this.url}/${consumer}`);
      if (status === 200 || status === 404) this.event("left", status, "", consumer);
      else this.event("refused", status, reason(answer), consumer);
    } catch (error) {
      this.logger.warn(`siding-consumer: leaving route ${this.route}: ${String((error as Error).message)} (the lease will lapse)`);
    }
  }

  private schedule(): void {
    if (this.stopped) return;
    const every = this.everySeconds;
    const delay = this.failures === 0 ? every : retryAfterSeconds(this.failures, every);
    this.timer = setTimeout(() => {
      this.running = this.tick().finally(() => {
        this.running = undefined;
        this.schedule();
      });
    }, delay * 1000);
    this.timer.unref();
  }

  private async tick(): Promise<void> {
    try {
      if (this.consumer === null || !(await this.renew())) await this.join();
      this.failures = 0;
    } catch (error) {
      this.failures += 1;
      if (error instanceof Unreachable) this.event("unreachable", error.status, error.message);
      else if (error instanceof RegistrationError) this.event("refused", error.status, error.message);
      else this.event("refused", null, String(error));
    }
  }

  private async join(): Promise<void> {
    const [status, answer] = await this.call("POST", this.url, this.body);
    if (status !== 200 && status !== 201) throw new RegistrationError(this.route, status, reason(answer));
    this.consumer = String(answer.consumer);
    this.leaseSeconds = Number(answer.lease_s);
    this.event("joined", status, String(answer.address ?? ""));
  }

  /** False when the lease is gone (404): join again. */
  private async renew(): Promise<boolean> {
    const [status, answer] = await this.call("PUT", `${this.url}/${this.consumer}`);
    if (status === 404) {
      this.event("lapsed", status, reason(answer));
      this.consumer = null;
      return false;
    }
    if (status !== 200) throw new RegistrationError(this.route, status, reason(answer));
    if (typeof answer.lease_s === "number" && answer.lease_s > 0) this.leaseSeconds = answer.lease_s;
    return true;
  }

  private async call(method: string, url: string, body?: unknown): Promise<[number, Record<string, unknown>]> {
    let response: Response;
    try {
      response = await fetch(url, {
        method,
        headers: this.headers,
        body: body === undefined ? null : JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (error) {
      throw new Unreachable(`siding's control API cannot be reached: ${describe(error)}`, null);
    }
    const text = await response.text().catch(() => "");
    let answer: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(text || "{}");
      answer = typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>) : { error: String(parsed) };
    } catch {
      answer = { error: text.slice(0, 200) };
    }
    if (response.status >= 500) throw new Unreachable(`siding answered ${response.status}: ${reason(answer)}`, response.status);
    return [response.status, answer];
  }

  private event(kind: RegistrationEventKind, status: number | null, detail: string, consumer?: string): void {
    const event: RegistrationEvent = { kind, route: this.route, consumer: consumer ?? this.consumer, status, detail };
    const line = `siding-consumer: route ${this.route}, consumer ${event.consumer}: ${kind}${detail ? ` (${detail})` : ""}`;
    if (kind === "joined" || kind === "left") this.logger.info(line);
    else this.logger.warn(line);
    this.onEvent?.(event);
  }
}

function reason(answer: Record<string, unknown>): string {
  return typeof answer.error === "string" ? answer.error : JSON.stringify(answer);
}

function describe(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
}
