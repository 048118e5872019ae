mkdir -p /tmp/stage && cp .gpu/part1/* /tmp/stage/ && tar -xJf .gpu/kcache.tar.xz -C /tmp && ls /tmp/kcache | wc -l && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader && pwd
