# call 1: stage part1 and the kernel cache; what the tape build needs (compiler, Python headers)
mkdir -p /tmp/stage && cp .gpu/part1/* /tmp/stage/ && tar -xJf .gpu/kcache.tar.xz -C /tmp && ls /tmp/kcache | wc -l
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; pwd
python3 -c "import sysconfig, os; p = sysconfig.get_paths()['include']; print(p, os.path.exists(p + '/Python.h'))"
which c++ g++ clang++; c++ --version | head -1
