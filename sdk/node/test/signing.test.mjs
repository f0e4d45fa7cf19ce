// Webhook signatures: siding's own signer's vectors verify; every kind of bad request is named.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { WebhookVerificationError, signWebhook, verifyWebhook } from "../dist/index.js";

const vectors = JSON.parse(readFileSync(new URL("../../testdata/webhook-signatures.json", import.meta.url), "utf8"));

function headers(id, timestamp, signature) {
  return { "webhook-id": id, "webhook-timestamp": String(timestamp), "webhook-signature": signature };
}

describe("verifyWebhook", () => {
  for (const v of vectors.cases) {
    it(`accepts siding's signature for ${v.id} and signs the same`, () => {
      const body = Buffer.from(v.body_base64, "base64");
      assert.equal(verifyWebhook(v.secret, headers(v.id, v.timestamp, v.signature), body, { nowSeconds: v.timestamp + 10 }), v.id);
      assert.equal(signWebhook(v.secret, v.id, v.timestamp, body), v.signature);
    });
  }

  const [v] = vectors.cases;
  const body = Buffer.from(v.body_base64, "base64");
  const now = { nowSeconds: v.timestamp };
  const problem = (name) => (error) => error instanceof WebhookVerificationError && error.problem === name;

  it("matches header names in any case and finds one good signature among several", () => {
    const mixed = { "Webhook-Id": v.id, "WEBHOOK-TIMESTAMP": String(v.timestamp), "webhook-signature": `v1a,xyz v1,AAAA ${v.signature}` };
    assert.equal(verifyWebhook(v.secret, mixed, body, now), v.id);
  });

  it("names each problem", () => {
    assert.throws(() => verifyWebhook(v.secret, { "webhook-id": v.id }, body, now), problem("missing-header"));
    assert.throws(() => verifyWebhook(v.secret, headers(v.id, "12.5", v.signature), body, now), problem("bad-timestamp"));
    assert.throws(() => verifyWebhook(v.secret, headers(v.id, v.timestamp, v.signature), body, { nowSeconds: v.timestamp + 301 }), problem("stale-timestamp"));
    assert.throws(() => verifyWebhook(v.secret, headers(v.id, v.timestamp, v.signature), body, { nowSeconds: v.timestamp - 301 }), problem("future-timestamp"));
    assert.throws(() => verifyWebhook(v.secret, headers(v.id, v.timestamp, v.signature), Buffer.concat([body, Buffer.from(" ")]), now), problem("bad-signature"));
    assert.throws(() => verifyWebhook("another secret", headers(v.id, v.timestamp, v.signature), body, now), problem("bad-signature"));
    assert.throws(() => verifyWebhook(v.secret, headers(`${v.id}x`, v.timestamp, v.signature), body, now), problem("bad-signature"));
  });

  it("honours the tolerance given", () => {
    const h = headers(v.id, v.timestamp, v.signature);
    assert.equal(verifyWebhook(v.secret, h, body, { nowSeconds: v.timestamp + 1000, toleranceSeconds: 1000 }), v.id);
  });

  it("refuses an unusable secret without echoing it", () => {
    assert.throws(() => signWebhook("whsec_!!!not-base64", "a", 1, body), (e) => !e.message.includes("not-base64"));
    assert.throws(() => signWebhook("", "a", 1, body), /must not be empty/);
  });
});
