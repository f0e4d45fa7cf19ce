// A consumer instance written in another language for tests/e2e/test_registration.py: an HTTP
// webhook server (Node's own http module, no packages) that joins a siding route through the
// control API, renews its lease every second and leaves on SIGTERM (docs/registration.md).
//
//   node registered_consumer.mjs CONTROL_URL ROUTE TOKEN RECORD_FILE
//
// Each delivery is answered 204 and recorded as "id,attempt,receive_time_s" in RECORD_FILE;
// every join, renewal and leave answer that is not a 2xx is printed as "registry <what> <code>".
import { appendFileSync } from "node:fs";
import { createServer } from "node:http";

const [controlUrl, route, token, recordFile] = process.argv.slice(2);
const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
const consumers = `${controlUrl}/routes/${route}/consumers`;
let lease = null;

const server = createServer((request, response) => {
  request.resume();
  request.on("end", () => {
    const id = request.headers["ce-id"];
    const attempt = request.headers["siding-attempt"];
    appendFileSync(recordFile, `${id},${attempt},${(Date.now() / 1000).toFixed(6)}\n`);
    response.writeHead(204).end();
  });
});

async function call(what, method, url, body) {
  try {
    const answer = await fetch(url, { method, headers, body: body && JSON.stringify(body) });
    if (!answer.ok) console.log(`registry ${what} ${answer.status}`);
    return answer.ok ? await answer.json() : null;
  } catch (error) {
    console.log(`registry ${what} unreachable`); // siding restarting: try again next time
    return null;
  }
}

server.listen(0, "127.0.0.1", async () => {
  const port = server.address().port;
  lease = await call("join", "POST", consumers, {
    address: `127.0.0.1:${port}/deliver`, transport: "http", capacity: 100,
  });
  console.log(`ready port=${port} consumer=${lease && lease.consumer}`);
  setInterval(() => call("renew", "PUT", `${consumers}/${lease.consumer}`), 1000);
});

process.on("SIGTERM", async () => {
  if (lease) await call("leave", "DELETE", `${consumers}/${lease.consumer}`);
  process.exit(0);
});
