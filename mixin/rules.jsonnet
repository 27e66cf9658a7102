(import 'mixin.libsonnet').prometheusRules
