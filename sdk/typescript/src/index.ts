// The kvgate TypeScript SDK: the generated kvgate.v1 messages and the Router
// and Admin service descriptors, for clients made with @connectrpc/connect's
// createClient over @connectrpc/connect-node's createGrpcTransport.
export * from "./gen/kvgate/v1/router_pb.js";
export * from "./gen/kvgate/v1/admin_pb.js";
