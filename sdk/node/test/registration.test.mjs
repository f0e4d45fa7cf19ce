// Joining a route, against a real HTTP server on loopback that answers as siding's control API
// does (docs/registration.md, "The calls"): join, renew every lease/3, join again on 404, back
// off while siding is away, leave on stop, the token in every call and in no log.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import http from "node:http";
import { inspect } from "node:util";
import { afterEach, beforeEach, describe, it } from "node:test";
import { ConsumerServer, Registration, RegistrationError, WebhookServer, ack } from "../dist/index.js";
import { advertised, joinBody, renewEverySeconds, retryAfterSeconds } from "../dist/registration.js";

const TOKEN = "s3cret-join-token";
const ROUTE = "orders";
const LEASE_S = 0.3;

/** The registration calls of siding's control API, kept in memory. */
function fakeSiding() {
  const state = { calls: [], consumers: new Map(), failing: null, n: 0 };
  const answer = (call) => {
    state.calls.push(call);
    if (state.failing !== null) return [state.failing, { error: "siding is busy" }];
    if (!call.authorization) return [401, { error: "a bearer token is needed" }];
    const parts = call.path.split("/").filter(Boolean);
    if (parts[0] !== "routes" || parts[1] !== ROUTE || parts[2] !== "consumers") return [404, { error: `no such route: ${parts[1]}` }];
    if (call.authorization !== `Bearer ${TOKEN}`) return [403, { error: "wrong token" }];
    const rest = parts.slice(3);
    const lease = (id) => ({ consumer: id, address: state.consumers.get(id), capacity: 100, route: ROUTE, lease_s: LEASE_S });
    if (rest.length === 0 && call.method === "POST") {
      const address = call.body.address;
      if (!address.includes(":")) return [400, { error: `address: '${address}' has no port` }];
      const known = [...state.consumers].find(([, a]) => a === address);
      const id = known ? known[0] : `c${++state.n}`;
      state.consumers.set(id, address);
      return [known ? 200 : 201, lease(id)];
    }
    if (rest.length === 1 && !state.consumers.has(rest[0])) return [404, { error: `no consumer ${rest[0]}: join again` }];
    if (rest.length === 1 && call.method === "PUT") return [200, lease(rest[0])];
    if (rest.length === 1 && call.method === "DELETE") {
      state.consumers.delete(rest[0]);
      return [200, { left: rest[0], route: ROUTE }];
    }
    return [404, { error: "no such call" }];
  };
  const server = http.createServer((request, response) => {
    const chunks = [];
    request.on("data", (c) => chunks.push(c));
    request.on("end", () => {
      const raw = Buffer.concat(chunks).toString();
      const call = { method: request.method, path: request.url, authorization: request.headers.authorization, body: raw ? JSON.parse(raw) : null };
      const [status, body] = answer(call);
      response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
    });
  });
  return {
    state,
    of: (method) => state.calls.filter((c) => c.method === method),
    start: () => new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${server.address().port}`))),
    stop: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

async function eventually(check, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    assert.ok(Date.now() < deadline, "not reached in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

function recorder() {
  const lines = [];
  return { lines, logger: { info: (m) => lines.push(m), warn: (m) => lines.push(m) } };
}

describe("the pure rules", () => {
  it("renews three times per lease and backs off by doubling up to the interval", () => {
    assert.equal(renewEverySeconds(15), 5);
    assert.deepEqual([1, 2, 3, 4, 5].map((n) => retryAfterSeconds(n, 5)), [0.5, 1, 2, 4, 5]);
    assert.equal(retryAfterSeconds(1, 0.1), 0.1);
    assert.equal(advertised("10.0.0.5:0", 50051), "10.0.0.5:50051");
    assert.ok(!advertised("0.0.0.0:50051", 50051).startsWith("0.0.0.0"));
    assert.deepEqual(joinBody("h:1"), { address: "h:1" });
    assert.deepEqual(joinBody("h:1/p", "http", 200), { address: "h:1/p", transport: "http", capacity: 200 });
  });

  it("sends the join bodies of the shared vectors (sdk/testdata, read by siding's own code)", () => {
    const { cases } = JSON.parse(readFileSync(new URL("../../testdata/join-requests.json", import.meta.url), "utf8"));
    assert.ok(cases.length > 0);
    for (const c of cases) assert.deepEqual(joinBody(c.address, c.transport ?? undefined, c.capacity ?? undefined), c.body);
  });
});

describe("Registration against a siding on loopback", () => {
  let siding;
  let url;
  beforeEach(async () => {
    siding = fakeSiding();
    url = await siding.start();
  });
  afterEach(() => siding.stop());

  it("joins with the token, renews every third of the lease and leaves on stop", async () => {
    const events = [];
    const { logger } = recorder();
    const reg = new Registration({
      controlUrl: url, route: ROUTE, token: TOKEN, address: "127.0.0.1:8080/hook", transport: "http", capacity: 50,
      onEvent: (e) => events.push(e), logger,
    });
    await reg.start();
    const consumer = reg.consumer;
    assert.deepEqual([...siding.state.consumers], [[consumer, "127.0.0.1:8080/hook"]]);
    const started = Date.now();
    await eventually(() => siding.of("PUT").length >= 3);
    assert.ok(Date.now() - started >= (2 * LEASE_S * 1000) / 3 - 20, "renewed faster than every lease/3");
    await reg.stop();
    assert.deepEqual(siding.of("POST")[0].body, { address: "127.0.0.1:8080/hook", transport: "http", capacity: 50 });
    assert.deepEqual(new Set(siding.state.calls.map((c) => c.authorization)), new Set([`Bearer ${TOKEN}`]));
    assert.deepEqual(new Set(siding.of("PUT").map((c) => c.path)), new Set([`/routes/${ROUTE}/consumers/${consumer}`]));
    assert.deepEqual(siding.of("DELETE").map((c) => c.path), [`/routes/${ROUTE}/consumers/${consumer}`]);
    assert.equal(siding.state.consumers.size, 0);
    assert.deepEqual(events.map((e) => e.kind), ["joined", "left"]);
    const renewals = siding.of("PUT").length;
    await new Promise((r) => setTimeout(r, LEASE_S * 1000));
    assert.equal(siding.of("PUT").length, renewals, "stopped means stopped");
  });

  it("joins again when a renewal is answered 404", async () => {
    const events = [];
    const reg = await new Registration({
      controlUrl: url, route: ROUTE, token: TOKEN, address: "127.0.0.1:50051", onEvent: (e) => events.push(e), logger: recorder().logger,
    }).start();
    const first = reg.consumer;
    siding.state.consumers.clear(); // the lease lapsed, or an operator removed it
    await eventually(() => reg.consumer !== null && reg.consumer !== first);
    assert.deepEqual([...siding.state.consumers.keys()], [reg.consumer]);
    await reg.stop();
    assert.deepEqual(events.map((e) => e.kind), ["joined", "lapsed", "joined", "left"]);
    assert.equal(events[1].status, 404);
    assert.equal(events[1].consumer, first);
  });

  it("backs off while siding answers 5xx and keeps its lease when it is back", async () => {
    const events = [];
    const reg = await new Registration({
      controlUrl: url, route: ROUTE, token: TOKEN, address: "127.0.0.1:50051", onEvent: (e) => events.push(e), logger: recorder().logger,
    }).start();
    const consumer = reg.consumer;
    siding.state.failing = 503;
    await eventually(() => events.filter((e) => e.kind === "unreachable").length >= 3);
    siding.state.failing = null;
    const count = siding.state.calls.length;
    await eventually(() => siding.state.calls.length > count && siding.state.calls.at(-1).method === "PUT");
    assert.equal(reg.consumer, consumer);
    await reg.stop();
    const unreachable = events.filter((e) => e.kind === "unreachable");
    assert.deepEqual(new Set(unreachable.map((e) => e.status)), new Set([503]));
    assert.match(unreachable[0].detail, /siding is busy/);
  });

  it("does not throw when siding is not there at start, and joins once it answers", async () => {
    siding.state.failing = 502;
    const events = [];
    const reg = await new Registration({
      controlUrl: url, route: ROUTE, token: TOKEN, address: "127.0.0.1:50051", onEvent: (e) => events.push(e), logger: recorder().logger,
    }).start();
    assert.equal(reg.consumer, null);
    assert.equal(events[0].kind, "unreachable");
    siding.state.failing = null;
    await eventually(() => reg.consumer !== null, 5000);
    await reg.stop();
    assert.equal(siding.state.consumers.size, 0);
    const nobody = [];
    const gone = await new Registration({
      controlUrl: "http://127.0.0.1:9", route: ROUTE, token: TOKEN, address: "h:1", onEvent: (e) => nobody.push(e), logger: recorder().logger,
    }).start();
    await gone.stop();
    assert.deepEqual(nobody.map((e) => e.kind), ["unreachable"]);
    assert.equal(nobody[0].status, null);
    assert.match(nobody[0].detail, /cannot be reached/);
  });

  for (const [route, token, address, status, reason] of [
    [ROUTE, "wrong", "h:1", 403, "wrong token"],
    ["nope", TOKEN, "h:1", 404, "no such route: nope"],
    [ROUTE, TOKEN, "nohost", 400, "address: 'nohost' has no port"],
  ]) {
    it(`a refused first join throws with siding's reason (${status})`, async () => {
      const reg = new Registration({ controlUrl: url, route, token, address, logger: recorder().logger });
      await assert.rejects(reg.start(), (error) => {
        assert.ok(error instanceof RegistrationError);
        assert.equal(error.status, status);
        assert.equal(error.message, `joining route ${route} was refused (${status}): ${reason}`);
        return true;
      });
    });
  }

  it("never logs or shows the token", async () => {
    const { lines, logger } = recorder();
    const reg = await new Registration({ controlUrl: url, route: ROUTE, token: TOKEN, address: "127.0.0.1:50051", logger }).start();
    siding.state.failing = 500;
    await eventually(() => lines.some((l) => l.includes("unreachable")));
    siding.state.failing = null;
    await reg.stop();
    const shown = lines.join("\n") + inspect(reg, { depth: 5 });
    assert.match(shown, /joined/);
    assert.match(shown, /left/);
    assert.ok(!shown.includes(TOKEN));
    const refused = new Registration({ controlUrl: url, route: ROUTE, token: `${TOKEN}x`, address: "h:1", logger });
    await assert.rejects(refused.start(), (error) => !String(error).includes(TOKEN));
  });

  it("the gRPC and webhook servers join once they listen and leave when they stop", async () => {
    const join = { controlUrl: url, route: ROUTE, token: TOKEN, capacity: 7 };
    const quiet = recorder().logger;
    const grpcServer = await new ConsumerServer(() => ack(), { listen: "127.0.0.1:0", join, logger: quiet }).start();
    const webServer = await new WebhookServer(() => ack(), { listen: "127.0.0.1:0", secret: null, join, logger: quiet }).start();
    const bodies = siding.of("POST").map((c) => c.body);
    assert.deepEqual(bodies, [
      { address: grpcServer.target, transport: "grpc", capacity: 7 },
      { address: `127.0.0.1:${webServer.port}`, transport: "http", capacity: 7 },
    ]);
    assert.equal(siding.state.consumers.size, 2);
    await Promise.all([grpcServer.stop(0), webServer.stop(0)]);
    assert.equal(siding.state.consumers.size, 0);
    assert.equal(siding.of("DELETE").length, 2);
  });

  it("a server whose join is refused stops (its port is free again) and throws", async () => {
    const join = { controlUrl: url, route: ROUTE, token: "wrong" };
    const quiet = recorder().logger;
    const servers = [
      (listen) => new ConsumerServer(() => ack(), { listen, join, logger: quiet }),
      (listen) => new WebhookServer(() => ack(), { listen, secret: null, join, logger: quiet }),
    ];
    for (const make of servers) {
      const refused = make("127.0.0.1:0");
      await assert.rejects(refused.start(), (error) => error instanceof RegistrationError && error.status === 403);
      const again = make(`127.0.0.1:${refused.port}`);
      await assert.rejects(again.start(), RegistrationError); // it could bind the same port
      assert.ok(!(again.registration?.consumer));
    }
  });
});
