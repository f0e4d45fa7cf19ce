// The service definitions, loaded at run time from the .proto files shipped in the package.

import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

const PROTO_ROOT = fileURLToPath(new URL("../proto/", import.meta.url));

/** The siding.v1 contract's file, as shipped in this package. */
export const CONSUMER_PROTO = `${PROTO_ROOT}siding/v1/consumer.proto`;
export const CONSUMER_SERVICE = "siding.v1.Consumer";

const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true, // proto3 `optional` fields say whether they are present through `_<field>`
  includeDirs: [PROTO_ROOT],
};

let loaded: { consumer: grpc.ServiceDefinition; health: grpc.ServiceDefinition } | undefined;

export function services(): { consumer: grpc.ServiceDefinition; health: grpc.ServiceDefinition } {
  if (loaded === undefined) {
    const definition = protoLoader.loadSync(["siding/v1/consumer.proto", "grpc/health/v1/health.proto"], LOADER_OPTIONS);
    loaded = {
      consumer: definition[CONSUMER_SERVICE] as grpc.ServiceDefinition,
      health: definition["grpc.health.v1.Health"] as grpc.ServiceDefinition,
    };
  }
  return loaded;
}
