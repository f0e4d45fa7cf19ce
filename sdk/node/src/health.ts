// grpc.health.v1: siding's circuit breaker probes Check; Watch is there for other tools.

import * as grpc from "@grpc/grpc-js";

export type ServingStatus = "SERVING" | "NOT_SERVING" | "SERVICE_UNKNOWN";

interface HealthRequest {
  service: string;
}
interface HealthResponse {
  status: ServingStatus;
}
type Watcher = grpc.ServerWritableStream<HealthRequest, HealthResponse>;

export class HealthService {
  private readonly statuses = new Map<string, ServingStatus>();
  private readonly watchers = new Set<Watcher>();

  /** Set a service's status ("" is the whole server) and tell its watchers. */
  set(service: string, status: ServingStatus): void {
    this.statuses.set(service, status);
    for (const watcher of this.watchers) {
      if (watcher.request.service === service) watcher.write({ status });
    }
  }

  status(service: string): ServingStatus {
    return this.statuses.get(service) ?? "SERVICE_UNKNOWN";
  }

  /** Every service NOT_SERVING, then every Watch ends (a server cannot stop with one open). */
  shutdown(): void {
    for (const service of this.statuses.keys()) this.set(service, "NOT_SERVING");
    for (const watcher of this.watchers) watcher.end();
    this.watchers.clear();
  }

  implementation(): grpc.UntypedServiceImplementation {
    return {
      Check: (call: grpc.ServerUnaryCall<HealthRequest, HealthResponse>, callback: grpc.sendUnaryData<HealthResponse>) => {
        const status = this.statuses.get(call.request.service);
        if (status === undefined) {
          callback({ code: grpc.status.NOT_FOUND, details: `unknown service ${JSON.stringify(call.request.service)}` });
          return;
        }
        callback(null, { status });
      },
      Watch: (call: Watcher) => {
        this.watchers.add(call);
        call.on("cancelled", () => this.watchers.delete(call));
        call.on("error", () => this.watchers.delete(call));
        call.write({ status: this.status(call.request.service) });
      },
    };
  }
}
