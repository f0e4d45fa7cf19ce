// The webhook server against real HTTP requests on loopback, signed as siding signs them.
import assert from "node:assert/strict";
import http from "node:http";
import { gzipSync } from "node:zlib";
import { after, before, describe, it } from "node:test";
import { WebhookServer, ack, dead, retry, signWebhook } from "../dist/index.js";
import { deferred, quiet } from "./helpers.mjs";

const SECRET = "whsec_c2lkaW5nLXRlc3Qtc2VjcmV0LWJ5dGVz";

function sidingHeaders(id, body, extra = {}) {
  const now = Math.floor(Date.now() / 1000);
  return {
    "content-type": "application/octet-stream",
    "ce-specversion": "1.0",
    "ce-id": id,
    "webhook-id": id,
    "webhook-timestamp": String(now),
    "webhook-signature": signWebhook(SECRET, id, now, body),
    "siding-attempt": "1",
    "siding-lane": "0",
    "siding-topic": "orders",
    "siding-partition": "0",
    "siding-offset": id.split("/").at(-1),
    ...extra,
  };
}

// One connection per request (no keep-alive pool to outlive the test).
function request(url, method, headers = {}, body = undefined) {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method, headers, agent: false }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, text: Buffer.concat(chunks).toString() }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const post = (url, headers, body) => request(url, "POST", headers, body);

function batchEvent(n, value) {
  return {
    specversion: "1.0",
    id: `orders/0/${n}`,
    source: "kafka://orders",
    type: "dev.siding.delivery",
    datacontenttype: "application/octet-stream",
    data_base64: Buffer.from(value).toString("base64"),
    sidingattempt: 1,
    sidinglane: 0,
    sidingtopic: "orders",
    sidingpartition: 0,
    sidingoffset: n,
  };
}

describe("WebhookServer", () => {
  const seen = [];
  let server;
  before(async () => {
    server = await new WebhookServer(
      (d, info) => {
        seen.push(d);
        const text = d.value?.toString("latin1") ?? "";
        if (text === "call") return dead(info.call);
        if (text === "dead") return dead("bad record");
        if (text === "retry") return retry({ reason: "busy", afterSeconds: 9 });
        return ack();
      },
      { secret: SECRET, maxBodyBytes: 1024, logger: quiet },
    ).start();
  });
  after(() => server.stop(1));

  it("verifies and acks a delivery, its bytes exact", async () => {
    const body = Buffer.from([0, 1, 2, 253, 254, 255]);
    const r = await post(server.url, sidingHeaders("orders/0/5", body), body);
    assert.equal(r.status, 204);
    const d = seen.at(-1);
    assert.equal(d.id, "orders/0/5");
    assert.ok(d.value.equals(body));
  });

  it("answers dead with 422 and retry with 500, the reason in the body", async () => {
    for (const [value, status] of [["dead", 422], ["retry", 500]]) {
      const body = Buffer.from(value);
      const r = await post(server.url, sidingHeaders("orders/0/6", body), body);
      assert.equal(r.status, status);
      assert.equal(r.text, value === "dead" ? "bad record" : "busy");
    }
  });

  it("tells the handler the call: webhook, webhook-batch", async () => {
    const body = Buffer.from("call");
    assert.equal((await post(server.url, sidingHeaders("orders/0/20", body), body)).text, "webhook");
    const batch = Buffer.from(JSON.stringify([batchEvent(21, "call")]));
    const headers = { ...sidingHeaders("batch:orders/0/21:1", batch), "content-type": "application/cloudevents-batch+json" };
    assert.equal(JSON.parse((await post(server.url, headers, batch)).text).results[0].reason, "webhook-batch");
  });

  it("refuses a request that does not verify without calling the handler", async () => {
    const before = seen.length;
    const body = Buffer.from("x");
    const tampered = await post(server.url, sidingHeaders("orders/0/7", body), Buffer.from("y"));
    assert.equal(tampered.status, 401);
    assert.match(tampered.text, /no webhook-signature matches/);
    const { "webhook-signature": _, ...unsigned } = sidingHeaders("orders/0/7", body);
    assert.equal((await post(server.url, unsigned, body)).status, 401);
    assert.equal(seen.length, before);
  });

  it("answers a batch with one result per delivery", async () => {
    const events = [batchEvent(10, "ok"), batchEvent(11, "dead"), batchEvent(12, "retry")];
    const body = Buffer.from(JSON.stringify(events));
    const id = `batch:orders/0/10:${events.length}`;
    const headers = { ...sidingHeaders(id, body), "content-type": "application/cloudevents-batch+json" };
    const before = server.stats();
    const r = await post(server.url, headers, body);
    assert.equal(r.status, 200);
    assert.deepEqual(JSON.parse(r.text), {
      results: [
        { id: "orders/0/10", verdict: "ack" },
        { id: "orders/0/11", verdict: "dead", reason: "bad record" },
        { id: "orders/0/12", verdict: "retry", after: 9, reason: "busy" },
      ],
    });
    assert.equal(server.stats().batches - before.batches, 1);
    assert.equal(server.stats().batchDeliveries - before.batchDeliveries, 3);
  });

  it("answers a route that PUTs or PATCHes to a path with the key, and 405 to GET", async () => {
    const body = Buffer.from("dead");
    for (const method of ["PUT", "PATCH"]) {
      const r = await request(`${server.url}orders/dead`, method, sidingHeaders("orders/0/30", body), body);
      assert.equal(r.status, 422, method);
    }
    assert.equal((await request(`${server.url}orders/dead`, "GET")).status, 405);
  });

  it("decodes a gzip body, verifies what it decoded and hands it to the handler", async () => {
    const value = Buffer.from('{"sku": "SKU-1", "qty": 1} '.repeat(30)); // 810 bytes, under the limit
    const headers = { ...sidingHeaders("orders/0/30", value), "content-encoding": "gzip" };
    const r = await post(server.url, headers, gzipSync(value));
    assert.equal(r.status, 204);
    const d = seen.at(-1);
    assert.ok(d.value.equals(value));
    assert.ok(!d.headers.some((h) => h.key.toLowerCase() === "content-encoding"));
  });

  it("refuses a body it cannot decode without calling the handler", async () => {
    const before = seen.length;
    const cases = [
      ["br", Buffer.from("x"), 415],
      ["gzip", Buffer.from("not gzip"), 400],
      ["gzip", gzipSync(Buffer.alloc(4096)), 413], // 4 KiB decoded, over maxBodyBytes
    ];
    for (const [encoding, body, status] of cases) {
      const headers = { ...sidingHeaders("orders/0/31", Buffer.alloc(0)), "content-encoding": encoding };
      assert.equal((await post(server.url, headers, body)).status, status, encoding);
    }
    assert.equal(seen.length, before);
  });

  it("answers 413 over the body limit, 400 to a request that is not siding's, 204 to OPTIONS", async () => {
    const big = Buffer.alloc(2048);
    assert.equal((await post(server.url, sidingHeaders("orders/0/8", big), big)).status, 413);
    const body = Buffer.from("x");
    const { "siding-topic": _, ...noTopic } = sidingHeaders("orders/0/9", body);
    const r = await post(server.url, noTopic, body);
    assert.equal(r.status, 400);
    assert.match(r.text, /missing header siding-topic/);
    assert.equal((await request(server.url, "OPTIONS")).status, 204);
  });
});

describe("WebhookServer without a secret, and stopping", () => {
  it("serves an unsigned route, and lets a request in flight finish when stopped", async () => {
    const release = deferred();
    const started = deferred();
    const server = await new WebhookServer(
      async () => {
        started.resolve();
        await release.promise;
        return ack();
      },
      { secret: null, logger: quiet },
    ).start();
    const body = Buffer.from("v");
    const { "webhook-signature": _, ...headers } = sidingHeaders("orders/0/1", body);
    const answer = post(server.url, headers, body);
    await started.promise;
    const stopping = server.stop(10);
    await new Promise((r) => setTimeout(r, 100));
    await assert.rejects(request(server.url, "OPTIONS"));
    release.resolve();
    assert.equal((await answer).status, 204);
    await stopping;
  });
});

describe("WebhookServer and siding's batch negotiation", () => {
  const release = deferred();
  let server;
  before(async () => {
    server = await new WebhookServer(
      async (d) => {
        const text = d.value?.toString("latin1") ?? "";
        if (text === "slow") await release.promise;
        if (text === "throw") throw new Error("database is down");
        return text === "dead" ? dead("bad record") : ack();
      },
      { secret: SECRET, logger: quiet },
    ).start();
  });
  after(() => server.stop(1));

  function batch(values, extra = {}) {
    const body = Buffer.from(JSON.stringify(values.map((v, n) => batchEvent(n, v))));
    const headers = { ...sidingHeaders(`batch:orders/0/0:${values.length}`, body), "content-type": "application/cloudevents-batch+json", ...extra };
    return { body, headers };
  }

  it("says siding-batch: v1 on every answer of the handler, single and batch", async () => {
    const body = Buffer.from("dead");
    const single = await post(server.url, sidingHeaders("orders/0/1", body), body);
    assert.equal(single.status, 422);
    assert.equal(single.headers["siding-batch"], "v1");
    const b = batch(["ok"]);
    const answered = await post(server.url, b.headers, b.body);
    assert.equal(answered.status, 200);
    assert.equal(answered.headers["siding-batch"], "v1");
  });

  it("answers a batch asked as a stream line by line as each finishes", { timeout: 20_000 }, async () => {
    // The slow delivery waits until the test has read every other line: a server that held the
    // lines back would never answer (siding settles each delivery as its line comes).
    const b = batch(["slow", "ok", "dead", "throw"], { accept: "application/x-ndjson, application/json" });
    const lines = [];
    const answer = await new Promise((resolve, reject) => {
      const req = http.request(server.url, { method: "POST", headers: b.headers, agent: false }, (res) => {
        let rest = "";
        res.setEncoding("utf8");
        res.on("data", (chunk) => {
          const parts = (rest + chunk).split("\n");
          rest = parts.pop();
          lines.push(...parts);
          if (lines.length === 3) release.resolve(); // only once the fast ones' lines were read
        });
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, rest }));
        res.on("error", reject);
      });
      req.on("error", reject);
      req.end(b.body);
    });
    assert.equal(answer.status, 200);
    assert.equal(answer.headers["content-type"], "application/x-ndjson");
    assert.equal(answer.headers["siding-batch"], "v1");
    assert.equal(answer.rest, "", "every line ends with \\n");
    const results = lines.map((line) => JSON.parse(line));
    assert.equal(results.at(-1).id, "orders/0/0", "the slow one last");
    assert.deepEqual(
      results.sort((x, y) => x.id.localeCompare(y.id)),
      [
        { id: "orders/0/0", verdict: "ack" },
        { id: "orders/0/1", verdict: "ack" },
        { id: "orders/0/2", verdict: "dead", reason: "bad record" },
        { id: "orders/0/3", verdict: "retry", reason: "database is down" },
      ],
    );
  });

  it("answers a batch not asked as a stream with one JSON answer", async () => {
    // An older siding does not ask for the stream: it gets the one answer it reads.
    for (const accept of [undefined, "application/json", "application/x-ndjsonx"]) {
      const b = batch(["ok"], accept === undefined ? {} : { accept });
      const r = await post(server.url, b.headers, b.body);
      assert.equal(r.headers["content-type"], "application/json", String(accept));
      assert.deepEqual(JSON.parse(r.text), { results: [{ id: "orders/0/0", verdict: "ack" }] });
    }
  });
});
