"""The configuration: the file's keys (:mod:`~ccadapter.config.keys`), how it is read
(:mod:`~ccadapter.config.load`), what is derived from it (:mod:`~ccadapter.config.views`),
its secrets (:mod:`~ccadapter.config.secrets`) and the rules across keys
(:mod:`~ccadapter.config.rules`)."""
