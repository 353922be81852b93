from setuptools import find_packages, setup

setup(
    name="bert-whitening",
    version="0.1.0",
    description="BERT-whitening sentence vectors, fitted and exported as one TensorFlow graph",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["bert_whitening", "bert_whitening.*"]),
    # zip(strict=True) and PEP 604 annotations (X | None) need 3.10; CI tests 3.11 only (the classifiers).
    python_requires=">=3.10",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    # bert4keras==0.11.5 is not listed: its metadata pins keras<=2.3.1, which cannot coexist
    # with TensorFlow 2. Install it with `pip install --no-deps bert4keras==0.11.5` (the Makefile
    # does); six is its one runtime dependency that TensorFlow does not already bring.
    install_requires=[
        "tensorflow>=2.16,<2.22",
        "tf-keras>=2.16,<2.22",
        "tensorflow-text>=2.16,<2.22",
        "numpy>=1.23",
        "scipy>=1.9",
        "tqdm>=4.60",
        "jieba>=0.42",
        "six>=1.16",
        "safetensors>=0.4",
        "matplotlib>=3.5",
    ],
    extras_require={
        "serving": ["tensorflow-serving-api>=2.16,<2.22"],
        # [tfrecord] brings the CRC32C that beam-encode's TFRecord shards need.
        "beam": ["apache-beam[tfrecord]>=2.60"],
        # eval-retrieval, index, search and export --corpus verification.
        "search": ["faiss-cpu>=1.8"],
        "test": ["pytest>=7", "tensorflow-serving-api>=2.16,<2.22", "apache-beam[tfrecord]>=2.60", "faiss-cpu>=1.8"],
    },
    entry_points={"console_scripts": ["bert-whitening = bert_whitening.__main__:main"]},
)
