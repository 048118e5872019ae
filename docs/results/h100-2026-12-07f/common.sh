# sourced by each call's script: the environment every part needs
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 INT8NAX_MODEL_CACHE=/tmp/models MLX_PTX_CACHE_DIR=/tmp/kcache
export COMMIT=${COMMIT:?} COMMIT_DATE=${COMMIT_DATE:?}
