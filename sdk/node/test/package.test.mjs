// The package as a user gets it: the shipped contract matches the repository's, the README's
// example runs, and the types check.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { CONSUMER_PROTO } from "../dist/index.js";
import { REPO_PROTO, consumerClient, delivery, unary } from "./helpers.mjs";

describe("the package", () => {
  it("ships the same consumer.proto as proto/siding/v1 (copy it over when the contract changes)", () => {
    assert.equal(
      readFileSync(CONSUMER_PROTO, "utf8"),
      readFileSync(REPO_PROTO, "utf8"),
      "sdk/node/proto/siding/v1/consumer.proto drifted: cp proto/siding/v1/consumer.proto sdk/node/proto/siding/v1/",
    );
  });

  it("runs the README's example: it answers, and SIGTERM stops it cleanly", async () => {
    const example = fileURLToPath(new URL("../examples/hello.mjs", import.meta.url));
    const child = spawn(process.execPath, [example], { env: { ...process.env, LISTEN: "127.0.0.1:0" }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (c) => (out += c));
    child.stderr.on("data", (c) => (out += c));
    const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
    while (!/listening on (\S+)/.test(out)) {
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(child.exitCode, null, out);
    }
    const target = /listening on (\S+)/.exec(out)[1];
    const client = consumerClient(target);
    const answers = [];
    for (const value of ['{"a":1}', "plain", null]) {
      answers.push((await unary(client, delivery(1, value === null ? { value: undefined } : { value: Buffer.from(value) }))).verdict);
    }
    client.close();
    assert.deepEqual(answers, ["VERDICT_ACK", "VERDICT_DEAD", "VERDICT_ACK"]);
    child.kill("SIGTERM");
    assert.equal(await exited, 0, out);
    assert.match(out, /SIGTERM: finishing deliveries in flight/);
  });

  it("declares its runtime dependencies: @grpc/grpc-js and @grpc/proto-loader only", () => {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
    assert.deepEqual(Object.keys(pkg.dependencies).sort(), ["@grpc/grpc-js", "@grpc/proto-loader"]);
    assert.equal(pkg.types, "./dist/index.d.ts");
  });
});
