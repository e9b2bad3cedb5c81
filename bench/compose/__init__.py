"""docker-compose.yml run for real on this machine, for the container tier
(`tests/containers`) and `bench.containers`: a Docker engine (`engine`), the images built with
nothing pulled (`images`), and the stack brought up and taken down (`stack`)."""
