import { ack, dead, retry, serve } from "siding-consumer";

const charge = async (id, value) => true; // your work here; deduplicate on id

await serve(async (d) => {
  if (d.value === null) return ack(); // a tombstone: nothing to do
  if (d.value[0] !== 0x7b) return dead("not JSON"); // straight to the DLQ, never retried
  if (!(await charge(d.id, d.value))) return retry({ afterSeconds: 30, reason: "provider busy" });
  return ack();
}, { listen: process.env.LISTEN ?? "0.0.0.0:50051" }); // gRPC + health; SIGTERM stops gracefully
