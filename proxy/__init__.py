"""mqproxy: RocketMQ 5's gRPC endpoint (``apache.rocketmq.v2.MessagingService``) over HTTP/2 on
Trio, speaking remoting to the NameServers and brokers through ``rmq_cluster.client``."""
