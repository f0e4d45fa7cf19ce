// The three verbs (and back-off): what they build, and the mistakes they refuse at once.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { replyForReturn, replyForThrow } from "../dist/reply.js";
import { DeadLetter, Reply, ack, backoff, dead, retry } from "../dist/index.js";

describe("replies", () => {
  it("build frozen answers", () => {
    const r = retry({ afterSeconds: 1.5, reason: "busy" });
    assert.deepEqual([r.verdict, r.afterSeconds, r.reason], ["retry", 1.5, "busy"]);
    assert.ok(Object.isFrozen(r));
    assert.deepEqual([retry().afterSeconds, retry().reason], [undefined, ""]);
    assert.deepEqual([dead("x").verdict, dead("x").reason], ["dead", "x"]);
    assert.deepEqual([backoff().verdict, ack().verdict, ack().outputs], ["backoff", "ack", []]);
  });

  it("refuse a delay that is not a finite number of seconds >= 0, naming it", () => {
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, "5"]) {
      assert.throws(() => retry({ afterSeconds: bad }), /retry\(\): afterSeconds must be a finite number of seconds >= 0/);
    }
    assert.throws(() => backoff({ afterSeconds: -0.5 }), /backoff\(\): afterSeconds .* not -0.5/);
    assert.throws(() => dead(42), /dead\(\): reason must be a string/);
    assert.throws(() => ack([{ topic: "" }]), /outputs\[0\]\.topic/);
  });

  it("take a throw as RETRY, DeadLetter as DEAD, and anything returned but a Reply as RETRY", () => {
    assert.deepEqual([replyForThrow(new Error("boom")).verdict, replyForThrow(new Error("boom")).reason], ["retry", "boom"]);
    assert.deepEqual([replyForThrow(new DeadLetter("pill")).verdict, replyForThrow(new DeadLetter("pill")).reason], ["dead", "pill"]);
    assert.equal(replyForThrow("text").reason, "text");
    assert.equal(replyForReturn({ verdict: "ack" }).reason, "handler returned Object, not a Reply");
    assert.equal(replyForReturn(null).verdict, "retry");
    assert.ok(replyForReturn(ack()) instanceof Reply);
  });
});
