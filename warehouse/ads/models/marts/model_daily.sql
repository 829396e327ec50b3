{%- set error_types = known_error_types() -%}

with

requests as (

    select * from {{ ref('int_model_calls') }}
    where {{ in_build_days('event_date') }}

),

model_versions as (

    select
        event_date,
        model,
        model_version,

        count(*) as requests,
        count(*) filter (where not is_error) as successes,
        count(*) filter (where is_error) as errors,
        {% for error_type in error_types %}
        count(*) filter (where is_error and error_type = '{{ error_type }}') as errors_{{ error_type }},
        {% endfor %}
        count(*) filter (
            where is_error and (error_type is null or error_type not in ('{{ error_types | join("', '") }}'))
        ) as errors_other,
        count(*) filter (where is_retry) as retries,

        quantile_cont(duration_ms, [0.5, 0.95, 0.99]) as latency_quantiles,
        quantile_cont(ttft_ms, [0.5, 0.95]) as ttft_quantiles,

        cast(coalesce(sum(input_tokens), 0) as bigint) as input_tokens,
        cast(coalesce(sum(output_tokens), 0) as bigint) as output_tokens,
        cast(coalesce(sum(cached_input_tokens), 0) as bigint) as cached_input_tokens,
        cast(sum(cost_usd) as decimal(18, 9)) as cost_usd,
        count(*) filter (where cost_usd is null) as unpriced_requests,

        count(*) filter (where is_cache_hit) as cache_hits,
        count(is_cache_hit) as cache_reported,
        count(feedback_kind) as labelled_requests,
        count(*) filter (where is_positive_feedback) as positive_feedback

    from requests
    group by event_date, model, model_version

),

final as (

    select
        event_date,
        model,
        model_version,
        requests,
        successes,
        successes / requests as success_rate,
        errors,
        {% for error_type in error_types %}
        errors_{{ error_type }},
        {% endfor %}
        errors_other,
        retries,
        retries / requests as retry_share,
        latency_quantiles[1] as latency_p50_ms,
        latency_quantiles[2] as latency_p95_ms,
        latency_quantiles[3] as latency_p99_ms,
        ttft_quantiles[1] as ttft_p50_ms,
        ttft_quantiles[2] as ttft_p95_ms,
        input_tokens,
        output_tokens,
        cached_input_tokens,
        cost_usd,
        unpriced_requests,
        cache_hits,
        cache_hits / nullif(cache_reported, 0) as cache_hit_rate,
        labelled_requests,
        positive_feedback / nullif(labelled_requests, 0) as positive_feedback_share

    from model_versions

)

select * from final
